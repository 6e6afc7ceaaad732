"""The viewer's pages over a run folder a real gateway wrote, read with httpx from a real server."""

from __future__ import annotations

import re
from html import unescape

import httpx

from roost.tests.viewer.conftest import GROUP


def get(url: str, path: str, status: int = 200) -> str:
    response = httpx.get(url + path)
    assert response.status_code == status, response.text[:500]
    return response.text


def test_run_page_has_evals_curves_steps_and_says_what_it_could_not_read(viewer):
    url, _ = viewer
    page = get(url, "/")
    assert re.search(r'<table id="evals">.*before.*valid_unseen.*0\.250', page, re.S)
    for metric in (
        "success",
        "reward",
        "kl",
        "entropy",
        "clip_fraction",
        "invalid_actions",
        "rollout_tokens_per_s",
        "step_s",
    ):
        assert f'data-metric="{metric}"' in page, metric
    assert "<polyline" in page
    assert "metrics.jsonl: 1 line(s) could not be read" in page  # the truncated last line
    assert 'href="/groups?version=0"' in page  # the scripted engine serves weight version 0


def test_groups_then_group_side_by_side_with_returns_and_advantages(viewer):
    url, played = viewer
    groups = get(url, "/groups?version=0")
    assert f'href="/group?id={GROUP}"' in groups
    assert re.search(
        rf"{GROUP}</a></td>\s*<td class=\"num\">2</td>\s*<td class=\"num\">1</td>\s*"
        r"<td class=\"num\">0\.625</td>",
        groups,
    )  # 2 sessions, 1 finished, mean return (1.25 + 0) / 2
    page = get(url, f"/group?id={GROUP}")
    episodes = page.split('<div class="episode">')[1:]
    assert [played["first"] in e for e in episodes] == [True, False]
    assert [played["second"] in e for e in episodes] == [False, True]
    assert '<b class="return">1.250</b>' in episodes[0] and '<b class="return">0.000</b>' in episodes[1]
    assert '<b class="advantage">' in episodes[0] and "A=0.500" in episodes[0]
    assert "It is sunny in Paris." in episodes[0] and "I do not know." in episodes[1]
    assert '<span class="kind fork">fork</span>' in episodes[0]


def test_session_shows_token_tree_with_fork_and_per_turn_rewards(viewer):
    url, played = viewer
    page = get(url, f"/sessions/{played['first']}")
    tree = page.split('<div class="tree" data-agent="main">')[1]
    # The answer extends the tool call; the edited retry forks off the tool call.
    assert tree.index(played["tool_call"]) < tree.index(played["answer"])
    assert re.search(r'<span class="kind fork">fork</span>\s*shares \d+ tokens with #0', tree)
    assert re.search(rf'call <a href="/calls/{played["answer"]}">.*?</td>\s*<td class="num">0\.250</td>', page, re.S)
    assert re.search(r"<td>session</td>\s*<td class=\"num\">1\.000</td>", page)


def test_session_shows_where_its_time_went(viewer):
    url, played = viewer
    page = get(url, f"/sessions/{played['first']}")
    table = page.split('<table id="time">')[1].split("</table>")[0]
    for part in (
        "engine",
        "· prefill (3 of 3 calls)",
        "· decode (3 of 3 calls)",
        "held for admission",
        "tools",
        "wall",
    ):
        assert f"<td>{part}" in table, part
    assert re.search(r"<td>wall</td><td class=\"num\">[\d.]+ ms</td><td class=\"num\">100%</td>", table)
    tree = page.split('<div class="tree" data-agent="main">')[1]
    # the scripted engine says its time to first token: each call shows its split
    assert len(re.findall(r'<span class="time">prefill [\d.]+ ms · decode [\d.]+ ms</span>', tree)) == 3


def test_call_shows_messages_tool_calls_and_decoded_tokens_with_hover(viewer):
    url, played = viewer
    page = get(url, f"/calls/{played['tool_call']}")
    assert "What is the weather in Paris?" in page
    assert "<b>get_weather</b>" in page and "Paris" in page.split('id="reply"')[1]
    assert "text from " in page  # the tiny model's tokenizer was found from the calls' model
    tokens = page.split('id="tokens">')[1]
    sampled = re.findall(r'<span class="tok s" style="background:hsl\(\d+, 70%, 82%\)" title="([^"]+)">', tokens)
    assert sampled and all("logprob" in t and "weights v0" in t for t in sampled)
    assert "tool_call" in "".join(re.findall(r">([^<]*)</span>", tokens))


def test_call_coloured_by_per_token_advantage_and_by_reward(viewer):
    url, played = viewer
    page = get(url, f"/calls/{played['answer']}?colour=advantage")
    titles = re.findall(
        r'class="tok s" style="background:hsl\((\d+), 70%, \d+%\)" title="[^"]*advantage ([+-]\S+)', page
    )
    assert [hue for hue, _ in titles[:3]] == ["120"] * 3 and titles[3][0] == "0"  # +0.9 green, then -0.9 red
    reward = get(url, f"/calls/{played['answer']}?colour=reward")
    assert "reward +0.2500" in reward


def test_unknown_ids_and_bad_parameters_get_clear_pages(viewer):
    url, _ = viewer
    assert "no session 'nope'" in unescape(get(url, "/sessions/nope", 404))
    assert "no call 'nope'" in unescape(get(url, "/calls/nope", 404))
    assert "no group 'nope'" in unescape(get(url, "/group?id=nope", 404))
    assert "bad request" in get(url, "/groups?offset=-1", 400)
    assert "bad request" in get(url, "/calls/x?colour=rainbow", 400)
    assert "bad request" in get(url, "/sessions/x?offset=abc", 400)
    assert get(url, "/health") == "ok"  # still serving


def test_files_of_the_run_folder_only(viewer, run_dir, tmp_path):
    url, _ = viewer
    run, _ = run_dir
    assert '"before"' in get(url, "/files/evals.json")
    (tmp_path / "secret.txt").write_text("TOP-SECRET-CONTENT")
    (run / "link.txt").symlink_to(tmp_path / "secret.txt")
    for path in (
        "/files/..%2f..%2fetc%2fpasswd",
        "/files/%2e%2e/%2e%2e/etc/passwd",
        "/files/%2fetc%2fpasswd",
        "/files/link.txt",
        "/files/logs%00.txt",
        f"/files/..%2f{tmp_path.name}%2fsecret.txt",
    ):
        response = httpx.get(url + path)
        assert response.status_code in (400, 404), path
        assert "TOP-SECRET-CONTENT" not in response.text and "root:" not in response.text
    with httpx.Client() as client:  # a raw path that no client normalises
        request = client.build_request("GET", url + "/files/x")
        request.url = request.url.copy_with(raw_path=b"/files/../../../../etc/passwd")
        response = client.send(request)
        assert response.status_code == 404 and "root:" not in response.text
