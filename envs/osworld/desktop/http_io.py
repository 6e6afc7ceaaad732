"""Requests and replies of the control server: JSON, url-encoded and multipart bodies.

Standard library only (the server runs on the desktop's system python); a body that does not
parse is a `BadRequest` (400), never a server error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qs

MAX_BODY_BYTES = 512 << 20


class BadRequest(ValueError):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Request:
    content_type: str
    body: bytes

    @classmethod
    def read(cls, handler: Any) -> Request:
        try:
            length = int(handler.headers.get("Content-Length") or 0)
        except ValueError as exc:
            raise BadRequest("Content-Length is not a number") from exc
        if length > MAX_BODY_BYTES:
            raise BadRequest(f"body of {length} bytes is over the {MAX_BODY_BYTES} byte limit", 413)
        return cls(handler.headers.get("Content-Type", ""), handler.rfile.read(length) if length else b"")

    def json(self) -> dict:
        try:
            data = json.loads(self.body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(f"body is not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise BadRequest("body must be a JSON object")
        return data

    def form(self) -> tuple[dict[str, str], dict[str, bytes]]:
        """(fields, files) of a url-encoded or multipart/form-data body."""
        if self.content_type.startswith("multipart/form-data"):
            return _multipart(self.content_type, self.body)
        try:
            parsed = parse_qs(self.body.decode(), keep_blank_values=True)
        except UnicodeDecodeError as exc:
            raise BadRequest(f"form body is not UTF-8: {exc}") from exc
        return {k: v[0] for k, v in parsed.items()}, {}


def _multipart(content_type: str, body: bytes) -> tuple[dict[str, str], dict[str, bytes]]:
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n" + body
    )
    if not message.is_multipart():
        raise BadRequest("multipart body without parts (is the boundary right?)")
    fields: dict[str, str] = {}
    files: dict[str, bytes] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not name:
            continue
        data = part.get_payload(decode=True) or b""
        if part.get_filename() is not None:
            files[name] = data
        else:
            fields[name] = data.decode(errors="replace")
            # Clients that send every field as a file part (MultipartEncoder tuples) still count.
            files.setdefault(name, data)
    return fields, files


@dataclass
class Reply:
    status: int
    body: bytes
    content_type: str
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, data: Any, status: int = 200) -> Reply:
        return cls(status, json.dumps(data).encode(), "application/json")

    @classmethod
    def text(cls, text: str, status: int = 200) -> Reply:
        return cls(status, text.encode(), "text/html; charset=utf-8")

    def send(self, handler: Any) -> None:
        handler.send_response(self.status)
        handler.send_header("Content-Type", self.content_type)
        handler.send_header("Content-Length", str(len(self.body)))
        for key, value in self.headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(self.body)
