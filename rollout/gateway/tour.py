"""A short, printed tour of what the gateway records (the first part of `roost demo`).

Starts a real engine (scripted sampler, tiny model, real Qwen3 tokenizer) and a real
gateway, plays a two-turn tool-calling conversation through the official `openai`
client, then prints the stored calls token by token: prompt ids, sampled ids with their
logprobs, and how each call extends the one before.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
TOOL_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
ANSWER = "It is sunny in Paris, 21 degrees."


def _conversation(base_url: str, api_key: str) -> list[dict]:
    from openai import OpenAI

    client = OpenAI(base_url=base_url, api_key=api_key)
    messages: list[dict] = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(
        model="tiny",
        messages=messages,
        tools=[WEATHER_TOOL],
        extra_body={"custom_params": {"scripted_reply": TOOL_CALL}},
    )
    call = first.choices[0].message.tool_calls[0]
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"sky": "sunny", "c": 21})},
    ]
    client.chat.completions.create(
        model="tiny", messages=messages, tools=[WEATHER_TOOL], extra_body={"custom_params": {"scripted_reply": ANSWER}}
    )
    return messages


def _print_calls(console, store: Path, session_id: str, tokenizer) -> None:
    from rich.table import Table

    from roost.rollout.store.reader import TrajectoryReader

    with TrajectoryReader(store) as reader:
        calls = reader.calls(session_id)
    for call in calls:
        console.print(
            f"[bold]call {call.seq}[/] kind={call.kind} reuse={call.reuse} "
            f"prompt={len(call.prompt_ids)} tokens (shared with parent: {call.shared_prefix_len}) "
            f"weight_version={call.weight_version} finish={call.finish_reason}"
        )
        new_text = tokenizer.decode(list(call.prompt_ids[call.shared_prefix_len :]))
        console.print(f"  prompt tokens after the shared prefix (the only ones tokenized): {new_text!r}")
        table = Table(show_header=True, header_style="bold")
        for column in ("sampled id", "token", "logprob"):
            table.add_column(column)
        for token, logprob in zip(call.sampled_ids, call.sampled_logprobs):
            table.add_row(str(token), repr(tokenizer.decode([token])), f"{logprob:.3f}")
        console.print(table)


def run_tour(console) -> None:
    """Engine + gateway + openai client; prints the recorded token-level trajectory."""
    import httpx
    from transformers import AutoTokenizer

    from roost.rollout.engine.launch import EngineProcess
    from roost.rollout.engine.tiny_model import tiny_model_dir
    from roost.rollout.gateway.launch import GatewayProcess
    from roost.rollout.keys import bearer

    store = Path(tempfile.mkdtemp(prefix="roost-tour-")) / "trajectories.sqlite"
    with console.status("starting the embedded engine (tiny model) and the gateway"):
        engine = EngineProcess("tiny", scripted=True)
        engine_url = engine.start()
        gateway = GatewayProcess(
            ["--backend", "embedded", "--engine-url", engine_url, "--model", "tiny", "--store", str(store)]
        )
    try:
        gateway_url = gateway.start()
        session = httpx.post(
            f"{gateway_url}/sessions",
            json={"group_id": "tour", "task": {"name": "weather"}},
            headers=bearer(gateway.admin_key),
        ).json()
        messages = _conversation(session["base_url"], session["key"])
        console.print(
            f"[bold]A tool-calling conversation through the gateway[/] (session {session['session_id']}, "
            f"{len(messages)} messages); what the store holds, token by token:"
        )
        _print_calls(console, store, session["session_id"], AutoTokenizer.from_pretrained(tiny_model_dir()))
        console.print(f"trajectory store: {store}\n")
    finally:
        gateway.stop()
        engine.stop()
