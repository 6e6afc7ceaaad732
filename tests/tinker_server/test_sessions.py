"""A session's life on `roost tinker serve`: the SDK's heartbeat keeps it, `ServiceClient.close`
finishes it, and its models are gone after that while other sessions' models keep training."""

from __future__ import annotations

import httpx
import pytest

from .conftest import API_KEY
from .test_bad_input import HEADERS, _datum

tinker = pytest.importorskip("tinker")


def test_closing_a_session_drops_its_models_and_no_others(tinker_url):
    other = tinker.ServiceClient(base_url=tinker_url, api_key=API_KEY)
    kept = other.create_lora_training_client(base_model="tiny", rank=4).result()
    service = tinker.ServiceClient(base_url=tinker_url, api_key=API_KEY)
    training = service.create_lora_training_client(base_model="tiny", rank=4).result()
    session_id = service.holder.get_session_id()
    beat = httpx.post(f"{tinker_url}/api/v1/session_heartbeat", json={"session_id": session_id}, headers=HEADERS)
    assert beat.status_code == 200

    service.close("success").result()

    info = httpx.post(f"{tinker_url}/api/v1/get_info", json={"model_id": training.model_id}, headers=HEADERS)
    assert info.status_code == 404 and f"no training model {training.model_id!r}" in info.json()["detail"]
    beat = httpx.post(f"{tinker_url}/api/v1/session_heartbeat", json={"session_id": session_id}, headers=HEADERS)
    assert beat.status_code == 410 and "was closed (success)" in beat.json()["detail"]
    assert kept.forward([_datum([1, 2, 3])], "cross_entropy").result().metrics["loss:sum"] > 0
    other.close("success").result()
