"""Whether an engine's logprobs are the model's own distribution, checked where it says so:
roost's engine reports it; SGLang 0.5.3's /get_server_info has no such field (only a warning);
an engine that reports temperature-scaled logprobs is refused."""

from __future__ import annotations

import dataclasses
import logging

import pytest

from roost.rollout.engine_api.sglang_client import SGLangClient
from roost.rollout.engine_api.sglang_logprobs import REPORT_KEY, check_original_logprobs, reported_original_logprobs
from roost.serving.listen import bind_listener, bound_port


async def test_roosts_engine_reports_the_models_own_logprobs(model_engine, caplog):
    async with SGLangClient(model_engine.url) as client:
        with caplog.at_level(logging.WARNING, logger="roost.sglang"):
            assert await check_original_logprobs(client) is True
    assert not caplog.records


def test_sglangs_server_info_does_not_say():
    """/get_server_info in SGLang 0.5.3: its ServerArgs' fields, scheduler info, internal states
    (a copy of the server args), version."""
    from sglang.srt.server_args import ServerArgs

    args = {field.name: None for field in dataclasses.fields(ServerArgs)}
    info = {
        **args,
        "max_total_num_tokens": 1,
        "internal_states": [{**args, "last_gen_throughput": 0.0}],
        "version": "0.5.3",
    }
    assert REPORT_KEY not in args and reported_original_logprobs(info) is None
    assert reported_original_logprobs({**info, "internal_states": [{REPORT_KEY: True}]}) is True
    assert reported_original_logprobs({**info, REPORT_KEY: False}) is False


async def test_an_engine_that_cannot_be_asked_is_warned_about(caplog):
    with bind_listener() as refusing:  # bound, never listening: every connection is refused
        async with SGLangClient(f"http://127.0.0.1:{bound_port(refusing)}", timeout_s=2) as client:
            with caplog.at_level(logging.WARNING, logger="roost.sglang"):
                assert await check_original_logprobs(client) is None
    assert "RETURN_ORIGINAL_LOGPROB=1" in caplog.text


async def test_a_gateway_refuses_an_engine_that_reports_temperature_scaled_logprobs(tiny_model_path, tmp_path):
    """The engine here stands in for an SGLang that would report the setting, as off."""
    from aiohttp import web

    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.gateway import Gateway, GatewayStartupError

    async def model_info(_: web.Request) -> web.Response:
        return web.json_response({"model_path": str(tiny_model_path), "tokenizer_path": str(tiny_model_path)})

    async def server_info(_: web.Request) -> web.Response:
        return web.json_response({REPORT_KEY: False, "version": "0.5.3"})

    app = web.Application()
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/get_server_info", server_info)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = bind_listener()
    port = bound_port(sock)
    await web.SockSite(runner, sock).start()
    gateway = Gateway(
        GatewayConfig(backend="sglang", engine_url=f"http://127.0.0.1:{port}", store_path=tmp_path / "store.sqlite")
    )
    try:
        with pytest.raises(GatewayStartupError, match="temperature-scaled .* RETURN_ORIGINAL_LOGPROB=1"):
            await gateway.start()
    finally:
        await gateway.stop()
        await runner.cleanup()
