"""The tiny vision-language model `tiny-vl`: Qwen3-VL architecture, weights from a fixed seed.

Its language model has the widths of `tiny-vllm` (heads of 32 dimensions, which vLLM's CPU
attention needs); its vision tower is two blocks of width 32 with one deepstack layer, so the
deepstack path is exercised. It ships the real processor (`Qwen3VLProcessor`: Qwen3-VL's image
processor with 16-pixel patches, 2x2 merge and 2-frame temporal patches), the real Qwen3
tokenizer and Qwen3-VL-Instruct's chat template, which renders tools and image parts. Images are
resized to at most `MAX_PIXELS` so a screenshot costs a CPU little: a 256x256 image becomes
8x8 merged patches, 64 `<|image_pad|>` tokens.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from roost.rollout.engine.tokenizer_files import qwen3_tokenizer_dir

# Pixel bounds of the image processor: the longest side pair rounds to patch*merge = 32 pixels.
MIN_PIXELS = 32 * 32
MAX_PIXELS = 320 * 320
IMAGE_MEAN = [0.5, 0.5, 0.5]  # Qwen3-VL's own normalisation
IMAGE_STD = [0.5, 0.5, 0.5]

# Qwen3-VL-Instruct's chat template: the text Qwen3-VL checkpoints publish (the Thinking edition's
# adds only its <think> handling to the assistant turn and the generation prompt):
# the Qwen3 tool format, image and video parts as one `<|image_pad|>` / `<|video_pad|>` each,
# which the processor expands to the image's token count.
QWEN3_VL_CHAT_TEMPLATE = """{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- macro render_content(content, do_vision_count) %}
    {%- if content is string %}
        {{- content }}
    {%- else %}
        {%- for item in content %}
            {%- if 'image' in item or 'image_url' in item or item.type == 'image' %}
                {%- if do_vision_count %}
                    {%- set image_count.value = image_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}Picture {{ image_count.value }}: {% endif -%}
                <|vision_start|><|image_pad|><|vision_end|>
            {%- elif 'video' in item or item.type == 'video' %}
                {%- if do_vision_count %}
                    {%- set video_count.value = video_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}Video {{ video_count.value }}: {% endif -%}
                <|vision_start|><|video_pad|><|vision_end|>
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- endif %}
        {%- endfor %}
    {%- endif %}
{%- endmacro %}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- render_content(messages[0].content, false) + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + render_content(messages[0].content, false) + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set content = render_content(message.content, false) %}
        {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
            {%- set ns.multi_step_tool = false %}
            {%- set ns.last_query_index = index %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = render_content(message.content, True) %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
{%- endif %}
"""

# What of the processor goes into the cached folder's fingerprint (tiny_model._fingerprint).
PROCESSOR_RECIPE = {
    "pixels": [MIN_PIXELS, MAX_PIXELS],
    "mean_std": [IMAGE_MEAN, IMAGE_STD],
    "template_sha256": hashlib.sha256(QWEN3_VL_CHAT_TEMPLATE.encode()).hexdigest(),
}


def seeded_vlm(config: dict):
    """The Qwen3-VL model of `config`, its weights drawn from the global generator (seeded by the caller)."""
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    return Qwen3VLForConditionalGeneration(Qwen3VLConfig(**config)).to(torch.float32)


def write_tiny_vlm(staging: Path, config: dict) -> None:
    """Write the seeded Qwen3-VL model and its processor files (as Qwen3-VL checkpoints ship them) into `staging`."""
    from transformers import AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    seeded_vlm(config).save_pretrained(staging, safe_serialization=True)
    patches = {
        "patch_size": 16,
        "temporal_patch_size": 2,
        "merge_size": 2,
        "image_mean": IMAGE_MEAN,
        "image_std": IMAGE_STD,
    }
    Qwen2VLImageProcessorPil(size={"shortest_edge": MIN_PIXELS, "longest_edge": MAX_PIXELS}, **patches).save_pretrained(
        staging
    )
    tokenizer = AutoTokenizer.from_pretrained(qwen3_tokenizer_dir())
    tokenizer.chat_template = QWEN3_VL_CHAT_TEMPLATE
    tokenizer.save_pretrained(staging)
    (staging / "chat_template.jinja").write_text(QWEN3_VL_CHAT_TEMPLATE)
    (staging / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen3VLProcessor"}, indent=2))
    # Written by hand: transformers builds Qwen3VLVideoProcessor only where torchvision is installed.
    video = {"video_processor_type": "Qwen3VLVideoProcessor", "processor_class": "Qwen3VLProcessor", **patches}
    video["size"] = {"shortest_edge": MIN_PIXELS * 2, "longest_edge": MAX_PIXELS * 2}
    (staging / "video_preprocessor_config.json").write_text(json.dumps(video, indent=2))
    for item in qwen3_tokenizer_dir().iterdir():
        if item.is_file() and not (staging / item.name).exists():
            shutil.copy2(item, staging / item.name)
