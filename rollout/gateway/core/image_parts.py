"""The image parts of a call, whichever wire they came on, as the template renders them.

Every wire hands its image parts here (chat's `image_url`, Messages' `image`, Responses'
`input_image`): each is decoded and checked (roost.rollout.vision.images), counted in the
placeholder ids it takes (roost.rollout.vision.placeholders), and becomes the one template part
`{"type": "image", "sha256": ...}`. The hash goes into the message's key, so the token tree
tells two images apart though their placeholder ids are the same. A refusal is a 400 naming the
part as its wire spells it (`messages[1].content[0]`, `messages.1.content.0`, `input.1.content.0`).

Only data URLs and base64 sources are read: the gateway fetches nothing from the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NoReturn

import orjson

from roost.rollout.gateway.config import DEFAULT_MAX_IMAGES
from roost.rollout.gateway.core.errors import InvalidRequest
from roost.rollout.gateway.core.prompt_builder import PromptImage
from roost.rollout.store.records import ImageRecord
from roost.rollout.vision.images import ImageRejected, decode_image_base64, decode_image_url
from roost.rollout.vision.placeholders import ImagePlaceholders


@dataclass(frozen=True)
class ImageInput:
    """One image of a call: where the request had it, its bytes, and what the engine is sent."""

    where: str
    record: ImageRecord
    data_url: str
    tokens: int
    source: str
    """The string the request carried the image in (a data URL, or base64 data)."""

    @property
    def prompt(self) -> PromptImage:
        return PromptImage(self.record.sha256, self.tokens)


@dataclass
class VisionModel:
    """What the gateway knows of a vision model: how an image becomes placeholder ids, and how
    many images one call may carry."""

    placeholders: ImagePlaceholders
    max_images: int = DEFAULT_MAX_IMAGES


@dataclass
class ImageParts:
    """Collects one request's images in the order the template renders them. `vision` None: the
    model reads text only, and any image part is refused naming `model`."""

    vision: VisionModel | None
    model: str
    images: list[ImageInput] = field(default_factory=list)

    def data_url(self, url: str, where: str, what: str) -> dict[str, Any]:
        """An image given as a URL (`what`: the wire's name for the part): data URLs only."""
        vision = self._accepting(where, what)
        if not url.startswith("data:"):
            raise InvalidRequest(
                f"{where} is an {what} part whose URL is not a data URL ({url[:40]!r}); this gateway "
                "fetches nothing from the network: send the image inline as data:image/png;base64,...",
                param=where,
                code="image_url_not_supported",
            )
        return self._add(vision, where, url, lambda: decode_image_url(url, vision.placeholders.limits))

    def base64(self, media_type: str, data: str, where: str, what: str) -> dict[str, Any]:
        """An image given as base64 data with its media type (Messages' `base64` source)."""
        vision = self._accepting(where, what)
        return self._add(vision, where, data, lambda: decode_image_base64(data, media_type, vision.placeholders.limits))

    def refuse(self, where: str, what: str, why: str) -> NoReturn:
        """An image part of a shape this gateway does not read (`why`: what to send instead)."""
        self._accepting(where, what)
        raise InvalidRequest(f"{where} is an {what} part {why}", param=where, code="image_source_not_supported")

    def prompt_images(self) -> list[PromptImage]:
        return [image.prompt for image in self.images]

    def _accepting(self, where: str, what: str) -> VisionModel:
        """The model's vision, when it takes one more image; else the 400 saying why not."""
        if self.vision is None:
            raise InvalidRequest(
                f"{where} is an {what} part, but model {self.model!r} reads text only; send text, or serve a "
                "vision model",
                param=where,
                code="image_not_supported",
            )
        if len(self.images) >= self.vision.max_images:
            raise InvalidRequest(
                f"{where} is image {len(self.images) + 1} of this call, past the limit of {self.vision.max_images} "
                "images a call (the gateway's max_images_per_call); send fewer images",
                param=where,
                code="too_many_images",
            )
        return self.vision

    def _add(self, vision: VisionModel, where: str, source: str, decode: Any) -> dict[str, Any]:
        try:
            image = decode()
        except ImageRejected as exc:
            raise InvalidRequest(f"{where}: {exc}", param=where, code=exc.code) from None
        width, height = image.image.size
        record = ImageRecord(image.sha256, image.media_type, image.data, width, height)
        tokens = vision.placeholders.count(width, height)
        self.images.append(ImageInput(where, record, image.data_url, tokens, source))
        return {"type": "image", "sha256": image.sha256}


def recorded_request(raw_body: bytes, images: list[ImageInput]) -> Any:
    """The request as stored with its call: as sent, but each image's data replaced by its
    address (`sha256:<hex>`), its bytes being in the store's images table once."""
    if not images:
        return orjson.Fragment(raw_body)
    addresses = {image.source: f"sha256:{image.record.sha256}" for image in images}
    return _replaced(orjson.loads(raw_body), addresses)


def _replaced(value: Any, addresses: dict[str, str]) -> Any:
    if isinstance(value, str):
        return addresses.get(value, value)
    if isinstance(value, dict):
        return {k: _replaced(v, addresses) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v, addresses) for v in value]
    return value
