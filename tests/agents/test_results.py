"""An episode's result as it leaves the runner: its status's values are the strings stored in
gateway sessions and printed by `roost eval --json`."""

from __future__ import annotations

import json

from roost.agents.results import EpisodeResult
from roost.outcome import EpisodeStatus, RewardSource


def test_the_status_values_are_the_strings_stored_sessions_hold():
    # the store keeps each session's finish info as JSON: a renamed value would misread them all
    assert [s.value for s in EpisodeStatus] == ["ok", "infra_error", "timeout", "agent_error"]
    assert EpisodeStatus("timeout") is EpisodeStatus.TIMEOUT
    assert [s.value for s in RewardSource] == ["env", "file", "none", "judge"]


def test_a_result_leaves_as_plain_json():
    result = EpisodeResult("t0", "train", EpisodeStatus.TIMEOUT, error="HarnessTimeout: ran past 5s", seconds=5.2)
    data = result.to_json()
    assert type(data["status"]) is str and json.loads(json.dumps(data)) == {
        "task_id": "t0",
        "split": "train",
        "status": "timeout",
        "reward": 0.0,
        "reward_source": "env",
        "success": False,
        "steps": 0,
        "turns": 0,
        "invalid_actions": 0,
        "stop_reason": "",
        "session_id": None,
        "error": "HarnessTimeout: ran past 5s",
        "seconds": 5.2,
        "exit_code": None,
        "output_tail": "",
        "env_reward": None,
        "judge_session_id": None,
    }
    assert not result.scored and EpisodeResult("t0", "train").scored
