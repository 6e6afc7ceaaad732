"""Rule choice of the scripted sampler (the sampler itself runs inside the real engine)."""

import pytest

from roost.rollout.engine.scripted_sampler import Script, ScriptedSampler, ScriptError


def sampler(*rules):
    return ScriptedSampler(Script.model_validate({"rules": [dict(match=m, reply=r) for m, r in rules]}))


def test_latest_match_wins_and_ties_go_to_the_earlier_rule():
    s = sampler(("weather", "call tool"), ("sunny", "final answer"), (None, "fallback"), ("sun", "shadowed"))
    assert s.reply_for("user: what is the weather?") == "call tool"
    assert s.reply_for("user: what is the weather? tool: sunny") == "final answer"
    assert s.reply_for("nothing relevant") == "fallback"


def test_a_list_of_replies_is_said_in_turn_per_rule():
    s = sampler(("act", ["look", "jump", "wait"]), (None, ["a", "b"]))
    assert [s.reply_for("please act") for _ in range(4)] == ["look", "jump", "wait", "look"]
    assert [s.reply_for("other") for _ in range(3)] == ["a", "b", "a"]
    with pytest.raises(ScriptError, match="empty list"):
        sampler(("act", []))


def test_no_rule_and_bad_regex_are_errors():
    with pytest.raises(ScriptError, match="no scripted rule"):
        sampler(("x", "y")).reply_for("abc")
    with pytest.raises(ScriptError, match="not a valid regex"):
        sampler(("(", "y"))


async def test_rules_drive_the_real_engine(scripted_engine):
    import httpx

    from roost.rollout.keys import bearer

    scripted_engine_url = scripted_engine.url
    rules = {
        "rules": [
            {"match": "weather", "reply": '<tool_call>\n{"name": "w"}\n</tool_call>'},
            {"match": None, "reply": "OK."},
        ]
    }
    async with httpx.AsyncClient(headers=bearer(scripted_engine.api_key)) as client:
        assert (await client.post(f"{scripted_engine_url}/roost/scripted_sampler", json=rules)).status_code == 200
        a = (await client.post(f"{scripted_engine_url}/generate", json={"text": "the weather?"})).json()
        b = (await client.post(f"{scripted_engine_url}/generate", json={"text": "hello"})).json()
        # Leave the shared engine with its starting script.
        await client.post(
            f"{scripted_engine_url}/roost/scripted_sampler", json={"rules": [{"match": None, "reply": "OK."}]}
        )
    assert a["text"] == '<tool_call>\n{"name": "w"}\n</tool_call>'
    assert b["text"] == "OK." and b["meta_info"]["finish_reason"] == {"type": "stop", "matched": 151645}
