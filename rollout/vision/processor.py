"""Load a Qwen3-VL checkpoint's processor (image processor, tokenizer, chat template).

`AutoProcessor.from_pretrained` builds Qwen3VLProcessor with its video processor, which needs
torchvision; roost's environment has none (its CPU torch build has no matching torchvision), and
roost sends images only. Where torchvision is missing the processor is built from the folder's
image processor and tokenizer, without a video processor; its image path is the same code.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

VIDEO_PROCESSOR_NEEDS = "torchvision"


def load_processor(folder: str | Path) -> Any:
    """The checkpoint's Qwen3VLProcessor, read offline from `folder`."""
    from transformers import AutoProcessor, AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    if importlib.util.find_spec(VIDEO_PROCESSOR_NEEDS) is not None:
        return AutoProcessor.from_pretrained(folder)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    return _image_only_processor_class()(image_processor, tokenizer, None, chat_template=tokenizer.chat_template)


def _image_only_processor_class() -> type:
    """Qwen3VLProcessor that accepts no video processor (transformers checks each part's class)."""
    from transformers import Qwen3VLProcessor

    class ImageOnlyQwen3VLProcessor(Qwen3VLProcessor):
        def check_argument_for_proper_class(self, argument_name, argument):
            if argument_name == "video_processor" and argument is None:
                return None
            return super().check_argument_for_proper_class(argument_name, argument)

    return ImageOnlyQwen3VLProcessor


def process_image(image_processor: Any, image: Any) -> tuple[Any, tuple[int, int, int]]:
    """One image's (pixel_values [t * h * w, patch values], (t, h, w) patch grid) as the image
    processor makes them: the engine and the trainer both read an image through here, so the
    trainer sees the features the engine sampled with."""
    out = image_processor(images=[image], return_tensors="pt")
    t, h, w = (int(v) for v in out["image_grid_thw"][0])
    return out["pixel_values"], (t, h, w)


def load_image_processor(folder: str | Path) -> Any:
    """The checkpoint's image processor alone (what an engine needs: it is sent expanded ids)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil.from_pretrained(folder)
