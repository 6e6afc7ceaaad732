"""VLLMClient's wire against vLLM's own classes: every request it builds validates as vLLM's
`GenerateRequest` (with the SGLang-named sampling parameters the gateway sends, renamed), and
an answer built with vLLM's `GenerateTokensResponse` reads back as the same ids, logprobs,
finish reason and weight version. vLLM is imported in its own virtualenv (a subprocess)."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from roost.rollout.engine_api.sglang_client import EngineRejected
from roost.rollout.engine_api.vllm_client import VLLMClient, _choice, _finish_reason, _logprobs, vllm_sampling_params

CHECK = """
import json, sys
from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest, GenerateTokensResponse
request = GenerateRequest.model_validate(json.loads(sys.argv[1]))
sp = request.sampling_params
answer = GenerateTokensResponse(request_id=request.request_id, choices=[{
    "index": 0, "finish_reason": "stop", "stop_reason": "END", "token_ids": [11, 12],
    "logprobs": {"content": [{"token_id": 11, "logprob": -0.5}, {"token_id": 12, "logprob": -1.25}]},
    "weight_versions": [{"version": "3", "start": 0, "end": 2}]}])
print(json.dumps({"max_tokens": sp.max_tokens, "seed": sp.seed, "min_tokens": sp.min_tokens, "logprobs": sp.logprobs,
                  "stop": sp.stop, "include_stop_str_in_output": sp.include_stop_str_in_output,
                  "answer": answer.model_dump(mode="json")}))
"""


@pytest.mark.vllm
def test_requests_validate_as_vllms_and_its_answers_read_back(vllm_py):
    params = {
        "max_new_tokens": 7,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.05,
        "sampling_seed": 5,
        "min_new_tokens": 1,
        "stop": ["END"],
        "stop_token_ids": [151645],
        "ignore_eos": False,
        "no_stop_trim": False,
        "presence_penalty": 0.1,
    }
    payload = VLLMClient("http://127.0.0.1:1").generate_payload([1, 2, 3], params, stream=True, rid="call-1")
    done = subprocess.run([str(vllm_py), "-c", CHECK, json.dumps(payload)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert {k: seen[k] for k in ("max_tokens", "seed", "min_tokens", "logprobs", "stop")} == {
        "max_tokens": 7,
        "seed": 5,
        "min_tokens": 1,
        "logprobs": 0,
        "stop": ["END"],
    }
    assert seen["include_stop_str_in_output"] is False
    choice = _choice(seen["answer"], "answer")
    assert (choice.token_ids, _logprobs(choice, [11, 12])) == ([11, 12], [-0.5, -1.25])
    assert _finish_reason(choice, [11, 12]) == {"type": "stop", "matched": "END"}
    client = VLLMClient("http://127.0.0.1:1")
    assert client._version(choice) == "3" and client.weight_version == "3"


def test_a_sampling_parameter_vllm_has_not_is_refused_by_name():
    with pytest.raises(EngineRejected, match=r"\['json_schema'\] have no vLLM counterpart"):
        vllm_sampling_params({"max_new_tokens": 4, "json_schema": "{}"})


def test_an_unreadable_checkpoint_is_refused_before_the_engine_is_touched(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    # nothing listens at this address: an answer means the engine was never called
    answer = asyncio.run(VLLMClient("http://127.0.0.1:1").update_weights_from_disk(str(tmp_path)))
    assert not answer.success and f"could not read the checkpoint {tmp_path}" in answer.message


IMAGE_CHECK = """
import json, sys
from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateRequest, GenerateTokensResponse
request = GenerateRequest.model_validate(json.loads(sys.argv[1]))
answer = GenerateTokensResponse(request_id=request.request_id, prompt_token_ids=json.loads(sys.argv[2]),
    choices=[{"index": 0, "finish_reason": "length", "token_ids": [7], "logprobs": {"content": [{"token_id": 7, "logprob": -2.0}]}}])
print(json.dumps({"token_ids": request.token_ids, "parts": request.content_parts, "return_token_ids": request.return_token_ids,
                  "answer": answer.model_dump(mode="json")}))
"""
PAD = 151655  # Qwen3-VL's <|image_pad|>


@pytest.mark.vllm
def test_a_call_with_images_sends_one_placeholder_per_image_as_vllm_wants_and_checks_its_expansion(vllm_py):
    """vLLM's Qwen-VL processor expands each image's ONE `<|image_pad|>` itself, so the client sends each
    rendered run as one id with the images as content parts, asks for the expanded prompt back, and
    refuses an answer whose expansion differs from the gateway's ids."""
    from roost.rollout.engine_api.sglang_client import EngineProtocolError
    from roost.rollout.engine_api.vllm_client import _answer, check_prompt_seen

    rendered = [1, 151652, *[PAD] * 4, 151653, 2, 151652, *[PAD] * 9, 151653, 3]
    urls = ["data:image/png;base64,AAAA", "data:image/png;base64,BBBB"]
    payload = VLLMClient("http://127.0.0.1:1").generate_payload(
        rendered, {"max_new_tokens": 1}, stream=False, rid="c", image_data=urls, image_token_id=PAD
    )
    done = subprocess.run(
        [str(vllm_py), "-c", IMAGE_CHECK, json.dumps(payload), json.dumps(rendered)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["token_ids"] == [1, 151652, PAD, 151653, 2, 151652, PAD, 151653, 3]
    assert seen["parts"] == [{"type": "image_url", "url": u} for u in urls] and seen["return_token_ids"] is True
    check_prompt_seen(_answer(seen["answer"], "answer"), rendered)
    twice = [*rendered[:2], *[PAD] * 3, *rendered[2:]]  # an expansion of the already expanded run
    with pytest.raises(EngineProtocolError, match="first difference at 6"):
        check_prompt_seen(_answer({**seen["answer"], "prompt_token_ids": twice}, "answer"), rendered)


def test_a_call_whose_image_runs_and_images_disagree_is_refused_by_count():
    with pytest.raises(EngineRejected, match="has 1 runs of image placeholder id 9 but 2 images"):
        VLLMClient("http://127.0.0.1:1").generate_payload(
            [1, 9, 9, 2], {}, stream=False, rid=None, image_data=["data:a", "data:b"], image_token_id=9
        )
