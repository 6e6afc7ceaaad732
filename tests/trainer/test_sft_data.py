"""SFT samples rendered from a transcript are token for token what the gateway records when
the `tool` agent's chat is played through it, with the loss on the replies only."""

from __future__ import annotations

import httpx

from roost.rollout.keys import bearer
from roost.trainer.batches import samples_from_store
from roost.trainer.sft_data import ChatRenderer, Transcript, tool_agent_messages

TOOLS = [{"type": "function", "function": {
    "name": "act", "description": "Send one command to the household game.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]

TRANSCRIPT = Transcript("t0", "You are in the middle of a room.\n\nYour task is to: put a apple in fridge.", [
    ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1."),
    ("take apple 1 from countertop 1", "You pick up the apple 1 from the countertop 1."),
    ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
], reward=1.0, success=True)


def reply_text(message: dict) -> str:
    call = message["tool_calls"][0]["function"]
    return f'<tool_call>\n{{"name": "{call["name"]}", "arguments": {call["arguments"]}}}\n</tool_call>'


async def play_through_gateway(gateway_url: str, admin_key: str, messages: list[dict]) -> str:
    """Each assistant turn forced (scripted sampler) to the transcript's reply."""
    async with httpx.AsyncClient(timeout=60) as http:
        admin = bearer(admin_key)
        session = (await http.post(f"{gateway_url}/sessions", json={"group_id": "g"}, headers=admin)).json()
        for index, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            answer = await http.post(f"{session['base_url']}/chat/completions", headers=bearer(session["key"]), json={
                "model": "tiny", "messages": messages[:index], "tools": TOOLS, "max_tokens": 64,
                "custom_params": {"scripted_reply": reply_text(message)}})
            assert answer.status_code == 200, answer.text
            assert answer.json()["choices"][0]["message"]["tool_calls"]
        await http.post(f"{gateway_url}/sessions/{session['session_id']}/reward", json={"reward": 1.0}, headers=admin)
        await http.post(f"{gateway_url}/sessions/{session['session_id']}/finish", json={}, headers=admin)
    return session["session_id"]


async def test_rendered_sample_equals_the_gateways_record(scripted_engine_url, tiny_model_path, tmp_path):
    from roost.rollout.gateway.config import GatewayConfig
    from roost.rollout.gateway.launch import GatewayThread

    messages = tool_agent_messages(TRANSCRIPT)
    store = tmp_path / "store.sqlite"
    server = GatewayThread(GatewayConfig(engine_url=scripted_engine_url, model="tiny", store_path=store, port=0))
    with server as url:
        session_id = await play_through_gateway(url, server.admin_key, messages)
    [recorded] = list(samples_from_store(store, session_ids=[session_id]))

    renderer = ChatRenderer.from_pretrained(tiny_model_path)
    ours = renderer.sample(messages, TOOLS, session_id="s", reward=1.0)
    assert ours.tokens == recorded.tokens
    assert ours.loss_mask == recorded.loss_mask
    assert len(ours.calls) == 3

    text = renderer.tokenizer.decode([t for t, m in zip(ours.tokens, ours.loss_mask) if m])
    assert text.count("<tool_call>") == 3 and text.count("<|im_end|>") == 3
    assert "You arrive" not in text and "Your task" not in text  # observations carry no loss
