"""The Megatron-core adapter: GPTModel for Qwen3, Qwen2 and Llama dense models, weight
conversion to and from Hugging Face, forward on packed trees, the policy-loss train step, LoRA
adapters (`lora`).

Import the submodules you need (`model`, `convert`, `train`, `lora`); importing this package
loads nothing heavy.
"""
