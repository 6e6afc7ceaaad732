"""The gateway's OpenAPI document: every route is in it, and schemathesis finds no server
error and no answer that differs from it (a bounded number of generated cases per operation,
against a real gateway over the scripted engine)."""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode, checks
from starlette.routing import Route

from roost.rollout.gateway.openapi import operations
from roost.rollout.keys import bearer
from roost.tests.rollout.gateway_helpers import new_session, start_gateway

CASES = 50  # per operation: bounded, so the run stays a few seconds per operation (100 ran clean too)
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
]


@pytest.fixture(scope="module")
def gateway(scripted_engine_url, tmp_path_factory):
    # A generated call may ask for n=3 with ignore_eos and no max_tokens: bounded here by a short
    # default reply, not the 4096 tokens of the CLI's default (minutes on CPU).
    store = tmp_path_factory.mktemp("store") / "t.sqlite"
    server = start_gateway(scripted_engine_url, store, retry_after_s=1, default_max_tokens=64)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def gateway_schema(gateway):
    return schemathesis.openapi.from_url(f"{gateway.url}/openapi.json")


def test_every_route_is_documented_and_nothing_else(gateway):
    app = gateway.server.config.app
    served = {(m.lower(), r.path) for r in app.routes if isinstance(r, Route) for m in r.methods if m != "HEAD"}
    documented = {(op.method, op.path.replace("{model}", "{model:path}")) for op in operations()}
    assert served == documented
    document = httpx.get(f"{gateway.url}/openapi.json").json()
    assert document["openapi"].startswith("3.1") and document["paths"]["/sessions"]["post"]["requestBody"]


@pytest.fixture
def session(gateway):
    return new_session(gateway, group_id="schemathesis")


def _keys(operation, gateway, session: dict) -> dict[str, str]:
    """The key the operation needs (schemathesis would otherwise only ever see 401s); cases
    aimed at another session's path send this session's key and get 401, as they must."""
    security = operation.definition.raw.get("security") or []
    if {"adminKey": []} in security:
        return bearer(gateway.admin_key)
    return bearer(session["key"]) if security else {}


def _strategy(operation, session: dict):
    """Generated cases, half of them aimed at a real session and the served model, so that
    they reach the engine and the store instead of stopping at a 404."""
    random = [operation.as_strategy(mode) for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)]
    params = {
        p: session["session_id"] if p == "sid" else "main" if p == "agent" else "tiny"
        for p in ("sid", "agent", "model")
        if f"{{{p}}}" in operation.path
    }
    aimed = operation.as_strategy(GenerationMode.POSITIVE, path_parameters=params).map(_served_model)
    return st.one_of(*random, aimed)


def _served_model(case):
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = "tiny"
    return case


@pytest.mark.parametrize("label", [f"{op.method.upper()} {op.path}" for op in operations()])
def test_generated_requests_get_documented_answers_and_no_server_error(label, gateway, gateway_schema, session):
    operation = gateway_schema.find_operation_by_label(label)

    @given(_strategy(operation, session))
    @settings(
        max_examples=CASES,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
    )  # no shrinking: it calls the server
    def check(case):
        response = case.call(base_url=gateway.url, headers=_keys(operation, gateway, session), timeout=30)
        case.validate_response(response, checks=CHECKS)

    try:
        check()
    finally:
        _back_in_rotation(gateway)


def _back_in_rotation(gateway) -> None:
    """Cases of `POST /admin/weight_version` set versions the engine does not serve, which takes it
    out of rotation (`stale`, as a failed sync would): the barrier at the version it does report
    puts it back, so the next operation meets a gateway that serves."""
    admin = bearer(gateway.admin_key)
    engines = httpx.get(f"{gateway.url}/admin/engines", headers=admin).json()["engines"]
    answer = httpx.post(
        f"{gateway.url}/admin/weight_version", json={"weight_version": engines[0]["weight_version"]}, headers=admin
    )
    assert answer.status_code == 200 and answer.json()["engines"][0]["state"] == "up", answer.text
