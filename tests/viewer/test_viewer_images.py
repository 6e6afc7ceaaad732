"""Images on a call's page: an image a token engine's call stored once (by its sha256) shows from
`/images/{sha256}`, on the chat and the Responses wire; a pass-through call's data URL shows as it
was sent; an image the store lacks, or a malformed address (400), gets a clear page."""

from __future__ import annotations

import base64
import hashlib
from array import array
from html import unescape

import httpx
import openai

from roost.rollout.store.records import CallRecord, ImageRecord, ImageSpan, SessionRecord
from roost.rollout.store.trajectory_store import TrajectoryStore
from roost.tests.rollout.gateway_helpers import new_session, start_gateway
from roost.tests.rollout.test_gateway_images import PIXEL, VisionUpstream
from roost.tests.viewer.conftest import viewer_server
from roost.viewer.app import ViewerConfig

PNG = base64.b64decode(PIXEL.split(",", 1)[1])
SHA = hashlib.sha256(PNG).hexdigest()


async def image_store(path) -> None:
    """Two calls as the gateway records a token engine's: chat and Responses requests whose image
    data is replaced by its address, the bytes in the images table once."""
    store = TrajectoryStore(path).open()
    chat = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"sha256:{SHA}"}}]}]}
    responses = {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": f"sha256:{SHA}"}]}]}
    try:
        await store.create_session(SessionRecord(session_id="s", key_hash="h", group_id="g"))
        for seq, (call_id, endpoint, request) in enumerate(
            [("c-chat", "chat", chat), ("c-resp", "responses", responses)]
        ):
            call = CallRecord(
                call_id=call_id,
                session_id="s",
                agent_id="main",
                parent_agent=None,
                seq=seq,
                endpoint=endpoint,
                parent_call_id=None,
                shared_prefix_len=0,
                kind="root",
                reuse="none",
                backend="embedded",
                model="tiny-vl",
                finish_reason={"type": "stop"},
                weight_version="0",
                prompt_ids=array("i", [1, 7, 7, 2]),
                sampled_ids=array("i", [3]),
                sampled_logprobs=array("d", [-0.5]),
                sampling_params={},
                timings={},
                request=request,
                response={"message": {"role": "assistant", "content": "A pixel."}},
                images=[ImageSpan(SHA, 1, 2)],
                created_at=0.0,
            )
            await store.record_call(call, [ImageRecord(SHA, "image/png", PNG, 1, 1)])
    finally:
        store.close()


async def test_a_stored_image_shows_on_its_calls_pages_and_is_served_by_address(tmp_path):
    await image_store(tmp_path / "trajectories.sqlite")
    with viewer_server(ViewerConfig(store=tmp_path / "trajectories.sqlite")) as url:
        for call_id in ("c-chat", "c-resp"):
            page = unescape(httpx.get(f"{url}/calls/{call_id}").text)
            assert f'<img class="image" src="/images/{SHA}"' in page, page[:2000]
        image = httpx.get(f"{url}/images/{SHA}")
        assert image.status_code == 200 and image.content == PNG and image.headers["content-type"] == "image/png"
        missing = httpx.get(f"{url}/images/{'0' * 64}")
        assert missing.status_code == 404 and "no image" in missing.text
        malformed = httpx.get(f"{url}/images/not-a-hash")
        assert malformed.status_code == 400 and "sha256" in malformed.text, malformed.text
        assert httpx.get(f"{url}/health").status_code == 200  # it keeps serving


def test_a_pass_through_calls_data_url_shows_as_sent(tmp_path):
    upstream = VisionUpstream()
    server = start_gateway(upstream.url, tmp_path / "trajectories.sqlite", backend="openai", model=None)
    try:
        session = new_session(server)
        client = openai.OpenAI(base_url=session["base_url"], api_key=session["key"], max_retries=0)
        content = [{"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": PIXEL}}]
        client.chat.completions.create(model="vision", messages=[{"role": "user", "content": content}])
        calls = httpx.get(
            f"{server.url}/sessions/{session['session_id']}", headers={"Authorization": f"Bearer {server.admin_key}"}
        ).json()["calls"]
    finally:
        server.stop()
        upstream.shutdown()
    with viewer_server(ViewerConfig(store=tmp_path / "trajectories.sqlite")) as url:
        page = unescape(httpx.get(f"{url}/calls/{calls[0]['call_id']}").text)
    assert f'<img class="image" src="{PIXEL}"' in page and "What is this?" in page
