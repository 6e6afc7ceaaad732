"""Images end to end: a gateway over the embedded engine serving `tiny-vl`. An image call on each
wire (openai chat `image_url`, anthropic `image` block, openai responses `input_image`) is
answered by the engine, recorded with its image once (content-addressed) and with the prompt ids
the engine saw; a second turn resending the image extends the first call's path. A corrupt image
or too many images is a 400 naming the part, and nothing is recorded."""

from __future__ import annotations

import base64
import hashlib

import anthropic
import httpx
import openai
import pytest

from roost.rollout.store.reader import TrajectoryReader
from roost.tests.rollout.gateway_helpers import assert_one_path, new_session, say
from roost.tests.vision_helpers import noise_png, scripted_vision_gateway

MAX_IMAGES = 2


PNG = noise_png(0)
B64 = base64.b64encode(PNG).decode()
URL = "data:image/png;base64," + B64
SHA = hashlib.sha256(PNG).hexdigest()


@pytest.fixture(scope="module")
def vision_gateway(tmp_path_factory):
    """(server, store, spy): a gateway on a scripted tiny-vl engine behind a spy."""
    folder = tmp_path_factory.mktemp("vl")
    with scripted_vision_gateway(folder, spy=True, model="tiny-vl", max_images_per_call=MAX_IMAGES) as (server, spy):
        yield server, folder / "trajectories.sqlite", spy


def chat_turns(session: dict) -> None:
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
    history = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": URL}}, {"type": "text", "text": "What?"}],
        }
    ]
    first = client.chat.completions.create(model="tiny-vl", messages=history, extra_body=say("Noise."))
    assert first.choices[0].message.content == "Noise."
    history += [{"role": "assistant", "content": "Noise."}, {"role": "user", "content": "Sure?"}]
    chunks = client.chat.completions.create(model="tiny-vl", messages=history, extra_body=say("Yes."), stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Yes."  # streamed, too


def messages_turns(session: dict) -> None:
    client = anthropic.Anthropic(
        base_url=session["base_url"].removesuffix("/v1"), api_key=session["key"], max_retries=0
    )
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": B64}}
    history = [{"role": "user", "content": [image, {"type": "text", "text": "What?"}]}]
    first = client.messages.create(model="tiny-vl", max_tokens=32, messages=history, extra_body=say("Noise."))
    assert first.content[0].text == "Noise."
    history += [{"role": "assistant", "content": "Noise."}, {"role": "user", "content": "Sure?"}]
    client.messages.create(model="tiny-vl", max_tokens=32, messages=history, extra_body=say("Yes."))


def responses_turns(session: dict) -> None:
    client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
    history: list[dict] = [
        {
            "role": "user",
            "content": [{"type": "input_image", "image_url": URL}, {"type": "input_text", "text": "What?"}],
        }
    ]
    first = client.responses.create(model="tiny-vl", input=history, extra_body=say("Noise."))
    assert first.output_text == "Noise."
    history += [{"role": "assistant", "content": "Noise."}, {"role": "user", "content": "Sure?"}]
    client.responses.create(model="tiny-vl", input=history, extra_body=say("Yes."))


@pytest.mark.parametrize(
    ("turns", "endpoint"), [(chat_turns, "chat"), (messages_turns, "messages"), (responses_turns, "responses")]
)
def test_an_image_call_runs_through_the_engine_on_every_wire(vision_gateway, turns, endpoint):
    server, store, spy = vision_gateway
    session = new_session(server)
    turns(session)
    assert_one_path(store, session["session_id"], spy, [endpoint, endpoint])
    with TrajectoryReader(store) as reader:
        calls = reader.calls(session["session_id"])
        assert reader.image_count() == 1 and reader.image(SHA).data == PNG  # every wire's image: stored once
    for call in calls:
        [span] = call.images
        assert span.sha256 == SHA
        assert spy.seen[call.call_id].image_data == [URL]  # the engine got the image with the ids
        run = list(call.prompt_ids)[span.offset - 1 : span.offset + span.count + 1]
        assert span.count == 6 and len(set(run[1:-1])) == 1 and run[1] not in (run[0], run[-1])  # 96x64: 6 ids
    assert calls[1].images == calls[0].images  # the resent image sits where it did


def test_a_corrupt_image_or_too_many_are_refused_by_part(vision_gateway):
    server, store, _ = vision_gateway
    session = new_session(server)
    headers = {"Authorization": f"Bearer {session['key']}"}
    corrupt = "data:image/png;base64," + base64.b64encode(b"this is not a png").decode()
    bodies = [
        ([{"type": "text", "text": "What?"}, {"type": "image_url", "image_url": {"url": corrupt}}], "content[1]"),
        ([{"type": "image_url", "image_url": {"url": URL}}] * (MAX_IMAGES + 1), "content[2]"),
    ]
    for content, part in bodies:
        body = {"model": "tiny-vl", "messages": [{"role": "user", "content": content}]}
        resp = httpx.post(f"{session['base_url']}/chat/completions", json=body, headers=headers)
        assert resp.status_code == 400, resp.text
        assert part in resp.json()["error"]["message"], resp.text
    with TrajectoryReader(store) as reader:
        assert reader.calls(session["session_id"]) == []


def test_the_engine_refuses_image_requests_it_cannot_serve(vision_gateway):
    """Straight to the engine's /generate: what it refuses with images, each a 400 saying why."""
    _, _, spy = vision_gateway
    pad = 151655
    ids = [151644, 872, 198, 151652, *[pad] * 6, 151653, 151645, 198, 151644, 77091, 198]
    plain = {"input_ids": ids, "image_data": [URL], "sampling_params": {"max_new_tokens": 2}}
    assert httpx.post(f"{spy.engine_url}/generate", json=plain).status_code == 200
    corrupt = "data:image/png;base64," + base64.b64encode(b"no png").decode()
    refusals = [
        ({"image_data": [corrupt]}, "image_data[0]: the data is not a readable image"),
        ({"image_data": [URL, URL]}, "1 run(s) of image placeholder id 151655 but image_data carries 2"),
        ({"return_logprob": True, "logprob_start_len": 0}, "not served for prompts with images"),
        ({"session_params": {"id": "s", "rid": "r"}}, "a continued request's images are not kept"),
    ]
    for change, message in refusals:
        resp = httpx.post(f"{spy.engine_url}/generate", json={**plain, **change})
        assert resp.status_code == 400 and message in resp.text, resp.text
