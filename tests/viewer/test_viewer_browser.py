"""The viewer in a real browser (Debian's Chromium through Playwright): run → group → session → call.

Saves the call page as a screenshot: docs/images/viewer.png (the README's) when
ROOST_UPDATE_SCREENSHOTS=1, else under the test's tmp folder, so a test run never edits the
checkout. Skipped where Chromium
or playwright is missing, except under CI (see tests/envs/test_webshop_web.py, whose browser
fixtures this reuses).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roost.tests.envs.test_webshop_web import click, page  # noqa: F401 - `page` is a fixture
from roost.tests.viewer.conftest import GROUP

pytestmark = pytest.mark.browser
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "images" / "viewer.png"


async def test_navigate_run_group_session_call(viewer, page, tmp_path):  # noqa: F811
    url, played = viewer
    await page.set_viewport_size({"width": 1280, "height": 860})
    await page.goto(url + "/")
    assert await page.locator("svg.plot[data-metric='success'] polyline").count() == 1
    assert "0.250" in await page.inner_text("#evals")

    await click(page, "#steps a:text-is('v0')")
    await click(page, f"#groups a:text-is('{GROUP}')")
    returns = await page.locator("#episodes .return").all_inner_texts()
    assert returns == ["1.250", "0.000"]

    await click(page, f"#episodes a:has-text('{played['first']}')")
    tree = page.locator(".tree[data-agent='main']")
    assert await tree.locator(".kind.fork").count() == 1
    assert await tree.locator(".kind.root").count() == 1

    await click(page, f".tree a[href='/calls/{played['answer']}']")
    await click(page, "a:text-is('advantage')")
    assert "It is sunny in Paris." in await page.inner_text("#reply")
    sampled = page.locator("#tokens .tok.s")
    assert await sampled.count() > 3
    text = "".join(await sampled.all_inner_texts())
    assert "sunny" in text
    await sampled.first.hover()
    hover = await page.inner_text("#hover")
    assert "logprob" in hover and "advantage +0.9000" in hover and "weights v0" in hover
    shot = SCREENSHOT if os.environ.get("ROOST_UPDATE_SCREENSHOTS") == "1" else tmp_path / "viewer.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
