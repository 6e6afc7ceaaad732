"""Image handling for vision-language models: the one home shared by the gateway, the engines and the trainer.

images.py decodes an image part's payload under limits and names it by content; processor.py
loads a checkpoint's Qwen3-VL processor; placeholders.py expands a template's `<|image_pad|>`
into the number of image tokens the processor gives each image.
"""
