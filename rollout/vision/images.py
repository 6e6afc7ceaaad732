"""Decode an image part's payload (a data URL or raw base64) into bytes and a PIL image, under limits.

A payload that is not an image, or one over the byte or pixel limit, raises `ImageRejected`,
which says what was wrong; callers that know which part it was (the gateway's message and part
index, the engine's `image_data[i]`) add that and answer 400. An image's content address is the
sha256 of its bytes: two requests resending the same image share it, so the prefix cache and the
recorded trajectory store it once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import io
import re
from dataclasses import dataclass

from PIL import Image

MAX_IMAGE_BYTES = 20 * 1024 * 1024
MAX_IMAGE_PIXELS = 4096 * 4096
IMAGE_MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
_DATA_URL = re.compile(r"^data:(?P<media_type>[\w.+-]+/[\w.+-]+)(?:;[^,;]*)*;base64,(?P<data>.*)$", re.DOTALL)


class ImageRejected(ValueError):
    """An image payload that cannot be used: not base64, not an image, or over a limit; `code`
    names the kind for an error body."""

    code = "image_unreadable"


class ImageTooLarge(ImageRejected):
    """An image over the byte or pixel limit."""

    code = "image_too_large"


@dataclass(frozen=True)
class ImageLimits:
    """The largest image accepted: bytes of the encoded file and pixels of the decoded one."""

    max_bytes: int = MAX_IMAGE_BYTES
    max_pixels: int = MAX_IMAGE_PIXELS


@dataclass(frozen=True)
class DecodedImage:
    """An image part's bytes as sent, its decoded RGB picture and its content address."""

    data: bytes
    media_type: str
    image: Image.Image
    sha256: str

    @property
    def data_url(self) -> str:
        """The image as a `data:` URL (the form SGLang's `image_data` and OpenAI's `image_url` accept)."""
        return f"data:{self.media_type};base64,{base64.b64encode(self.data).decode('ascii')}"


def content_address(data: bytes) -> str:
    """The image's content address: the sha256 hex digest of its encoded bytes."""
    return hashlib.sha256(data).hexdigest()


def split_data_url(url: str) -> tuple[str, str]:
    """`data:<media type>;base64,<data>` → (media type, base64 text); anything else is rejected."""
    match = _DATA_URL.match(url)
    if match is None:
        raise ImageRejected("expected a data URL of the form data:image/<type>;base64,<data>")
    return match["media_type"], match["data"]


def decode_image_url(url: str, limits: ImageLimits = ImageLimits()) -> DecodedImage:
    """Decode a `data:image/...;base64,` URL (other URLs are refused: roost fetches nothing)."""
    media_type, data = split_data_url(url)
    return decode_image_base64(data, media_type, limits)


def decode_image_base64(data: str, media_type: str, limits: ImageLimits = ImageLimits()) -> DecodedImage:
    """Decode raw base64 image bytes of the given media type."""
    if media_type not in IMAGE_MEDIA_TYPES:
        raise ImageRejected(f"media type {media_type!r} is not one of {', '.join(IMAGE_MEDIA_TYPES)}")
    # The base64 text is 4/3 of the bytes: refuse an oversized payload before decoding it.
    if len(data) * 3 // 4 > limits.max_bytes + 3:
        raise ImageTooLarge(f"the image is over {limits.max_bytes} bytes")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ImageRejected(f"the image data is not valid base64 ({exc})") from exc
    return decode_image_bytes(raw, media_type, limits)


def decode_image_bytes(raw: bytes, media_type: str, limits: ImageLimits = ImageLimits()) -> DecodedImage:
    """Decode an image file's bytes into its RGB picture, checking the byte and pixel limits."""
    if len(raw) > limits.max_bytes:
        raise ImageTooLarge(f"the image is {len(raw)} bytes, over the limit of {limits.max_bytes}")
    try:
        with Image.open(io.BytesIO(raw)) as probe:
            width, height = probe.size  # read from the header, before any pixel is decoded
            if width * height > limits.max_pixels:
                raise ImageTooLarge(
                    f"the image is {width}x{height} = {width * height} pixels, over the limit of {limits.max_pixels}"
                )
            probe.load()
            image = probe.convert("RGB")
    except ImageRejected:
        raise
    except Exception as exc:  # PIL raises many kinds (UnidentifiedImageError, OSError, SyntaxError...)
        raise ImageRejected(f"the data is not a readable image ({type(exc).__name__}: {exc})") from exc
    return DecodedImage(data=raw, media_type=media_type, image=image, sha256=content_address(raw))
