"""The keys that guard roost's servers, and the rule that none binds beyond loopback without them.

    gateway admin key   ROOST_ADMIN_KEY    the control plane and trajectory reads (`roost gateway --admin-key`)
    engine key          ROOST_ENGINE_KEY   the engine's control routes (`roost engine --api-key`)
    session key         from POST /sessions, the harness's API key on its session's paths

A key is presented as `Authorization: Bearer <key>` or `x-api-key: <key>` (what Anthropic
clients send). Keys travel to child processes in the environment, not on command lines that
any user of the machine can read.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class KeyKind:
    """One kind of server key: how it looks, how it is given, what it guards."""

    name: str
    prefix: str
    flag: str
    env: str
    guards: str


ADMIN_KEY = KeyKind("admin key", "rak-", "--admin-key", "ROOST_ADMIN_KEY", "/sessions and /admin")
ENGINE_KEY = KeyKind(
    "engine key", "rek-", "--api-key", "ROOST_ENGINE_KEY", "/update_weights_from_disk and the other control routes"
)


class KeysRequired(ValueError):
    """A server was asked to bind beyond loopback without the key that guards it."""


def new_key(kind: KeyKind) -> str:
    return kind.prefix + secrets.token_urlsafe(24)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a request carries: its bearer token, else its `x-api-key`."""
    value = headers.get("authorization")
    if value and value[:7].lower() == "bearer ":
        return value[7:].strip() or None
    return headers.get("x-api-key") or None


def same_key(given: str | None, expected: str) -> bool:
    """Compare in constant time, so response timing does not reveal how much of a key matched."""
    return given is not None and hmac.compare_digest(given.encode(), expected.encode())


def bearer(key: str | None) -> dict[str, str]:
    """Headers presenting `key` (none for no key)."""
    return {"Authorization": f"Bearer {key}"} if key else {}


def without_server_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` less the admin and engine keys: for a harness, which gets its session's key only."""
    return {name: value for name, value in environ.items() if name not in (ADMIN_KEY.env, ENGINE_KEY.env)}


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def serving_key(server: str, host: str, given: str | None, kind: KeyKind) -> str:
    """The key `server` starts with: `given`, else a new one, printed on stderr. Beyond loopback a
    key must be given: a generated one nobody else knows would lock the clients out, and the
    printed line may end up in a log others read."""
    if given:
        return given
    if not is_loopback(host):
        raise KeysRequired(
            f"{server} will not bind {host} (beyond loopback) without its {kind.name}; set {kind.flag} or "
            f"{kind.env}, and give the same key to its clients (see docs/gateway.md, Keys)"
        )
    key = new_key(kind)
    print(
        f"{server}: {kind.name} {key} (generated; send it as 'Authorization: Bearer <key>' to {kind.guards}; "
        f"set {kind.flag} or {kind.env} to choose it)",
        file=sys.stderr,
        flush=True,
    )
    return key
