"""The opaque cursor of `GET /samples`: where the next page starts, signed by the gateway.

    text = PageCursor(groups_digest(groups), group=1, after=(created_at, session_id)).encode(secret)
    cursor = PageCursor.decode(text, secret, groups)     # CursorError: malformed, forged or another query's

A cursor names the last session a page held (its group's index in the query, its creation time
and id), so asking again from it gives the same page: the store's order is fixed and keyset
paging skips nothing that was there. It is signed (HMAC-SHA256 under a key derived from the
admin key, so it outlives a gateway restart with the same key) and bound to the query's groups,
so an edited cursor, or one sent with other groups, is refused instead of read.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from dataclasses import dataclass

import orjson


class CursorError(ValueError):
    """A cursor the gateway did not issue for this query."""


_SHAPE = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
_MALFORMED = (
    "the cursor is malformed (a page's next_cursor is two base64url parts joined by '.'); send "
    "next_cursor exactly as returned, or leave cursor out to start from the first page"
)


def cursor_secret(admin_key: str) -> bytes:
    return hashlib.sha256(b"roost samples cursor\0" + admin_key.encode()).digest()


def groups_digest(groups: list[str]) -> str:
    return hashlib.sha256(orjson.dumps(groups)).hexdigest()[:16]


@dataclass(frozen=True)
class PageCursor:
    groups: str
    """`groups_digest` of the query it was issued for."""
    group: int
    """Index in the query's groups of the last session's group."""
    after: tuple[float, str] | None
    """(created_at, session_id) of the last session served in that group; None: none yet."""

    def encode(self, secret: bytes) -> str:
        payload = _b64(orjson.dumps([self.groups, self.group, list(self.after) if self.after else None]))
        return f"{payload}.{_b64(_mac(secret, payload))}"

    @classmethod
    def decode(cls, text: str, secret: bytes, groups: list[str]) -> PageCursor:
        if not _SHAPE.fullmatch(text):
            raise CursorError(_MALFORMED)
        payload, _, mac = text.partition(".")
        if not hmac.compare_digest(_unb64(mac), _mac(secret, payload)):
            raise CursorError(
                "the cursor is not one this gateway issued (its signature does not match); send "
                "next_cursor exactly as a page returned it, or leave cursor out to start from the first page"
            )
        digest, group, after = orjson.loads(_unb64(payload))
        cursor = cls(digest, group, (after[0], after[1]) if after else None)
        if digest != groups_digest(groups) or not 0 <= group < len(groups):
            raise CursorError(
                "the cursor was issued for other groups; send the same group parameters, in the same order, "
                "as the request that returned it"
            )
        return cursor


def _mac(secret: bytes, payload: str) -> bytes:
    return hmac.new(secret, payload.encode(), hashlib.sha256).digest()[:16]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):  # a length no base64 text has
        raise CursorError(_MALFORMED) from None
