"""Which distribution an SGLang server's logprobs come from.

SGLang returns the logprob of each sampled token under the temperature-scaled distribution
unless the server's environment has `RETURN_ORIGINAL_LOGPROB=1` (0.5.3: `srt/layers/sampler.py`).
roost's trainer scores the model's own distribution, so at any temperature but 1 every
importance ratio would be off by the scaling. roost starts SGLang with `ORIGINAL_LOGPROBS_ENV`;
the gateway checks a server at connection time where it reports the setting (`/get_server_info`
`return_original_logprob`: roost's engine reports it, SGLang 0.5.3 does not, and is then only
warned about).
"""

from __future__ import annotations

import logging
from typing import Any

from roost.rollout.engine_api.sglang_client import EngineError, SGLangClient

log = logging.getLogger("roost.sglang")

ORIGINAL_LOGPROBS_ENV = {"RETURN_ORIGINAL_LOGPROB": "1"}
"""SGLang's environment for logprobs of the model's own distribution."""
REPORT_KEY = "return_original_logprob"
"""The `/get_server_info` field that says so, where a server reports it."""


class TemperatureScaledLogprobs(RuntimeError):
    """The engine says its logprobs are of the temperature-scaled distribution."""


def reported_original_logprobs(server_info: dict[str, Any]) -> bool | None:
    """What `/get_server_info` says about the logprobs: True (the model's own), False
    (temperature-scaled), None when it says nothing (SGLang 0.5.3)."""
    states = server_info.get("internal_states") or []
    for source in (server_info, *(s for s in states if isinstance(s, dict))):
        if REPORT_KEY in source:
            return bool(source[REPORT_KEY])
    return None


async def check_original_logprobs(client: SGLangClient) -> bool | None:
    """Refuse an engine that reports temperature-scaled logprobs; warn when it does not say."""
    try:
        info = await client.server_info()
    except EngineError as exc:
        info, why = {}, f"its /get_server_info failed: {exc}"
    else:
        why = f"its /get_server_info has no `{REPORT_KEY}` (SGLang 0.5.3 reports none)"
    reported = reported_original_logprobs(info if isinstance(info, dict) else {})
    if reported is False:
        raise TemperatureScaledLogprobs(
            f"the engine at {client.base_url} returns logprobs of the temperature-scaled distribution, but the "
            "trainer compares them with the model's own; restart it with RETURN_ORIGINAL_LOGPROB=1 in its "
            "environment (roost's own SGLang launches set it)"
        )
    if reported is None:
        log.warning(
            "cannot check that the engine at %s returns the model's own logprobs: %s. An SGLang server "
            "needs RETURN_ORIGINAL_LOGPROB=1 in its environment (roost's launches set it), else its "
            "logprobs at temperature != 1 are temperature-scaled and off from the trainer's",
            client.base_url,
            why,
        )
    return reported
