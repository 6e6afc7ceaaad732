"""Web mode in a real browser: Debian's Chromium, driven by Playwright, buys the goal's product.

Needs `chromium` (apt) and `playwright` (PyPI; no `playwright install`). Skipped where
either is missing, except under CI (`CI` set), where a missing browser fails the test.
"""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from roost.envs.episodes import ManagerConfig
from roost.envs.webshop.catalog import Catalog
from roost.envs.webshop.web import build_web_app
from roost.serving.listen import bind_listener, bound_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]

pytestmark = pytest.mark.browser


def _require_browser():
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        reason = "the playwright package is not installed"
    else:
        if shutil.which(CHROMIUM):
            return
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"the browser test must run in CI: {reason}")
    pytest.skip(reason)


@pytest.fixture
async def web_url():
    import uvicorn

    app = build_web_app({}, ManagerConfig(workers=1))
    sock = bind_listener()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if task.done():
            task.result()
        await asyncio.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{bound_port(sock)}"
    finally:
        server.should_exit = True
        await task
        sock.close()


@pytest.fixture
async def page():
    _require_browser()
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield await browser.new_page()
        finally:
            await browser.close()


async def click(page, selector: str) -> None:
    """Click something that loads a new page, and wait for that page."""
    async with page.expect_navigation():
        await page.click(selector)


async def test_a_browser_buys_the_goal_product_and_scores_one(web_url, page):
    goal = Catalog.generated().goals[0]
    await page.goto(f"{web_url}/web")
    await page.fill("#task_id", "0")
    await click(page, "#start")
    assert "/web/" in page.url and page.url.endswith("/")
    episode_url = page.url
    instruction = await page.inner_text("#instruction-text h4")
    assert goal.instruction_text in instruction

    await page.fill("#search_input", goal.instruction_text.split(", and price")[0])
    await click(page, "button:text-is('Search')")
    while await page.locator(f"a.product-link:text-is('{goal.asin}')").count() == 0:
        await click(page, "button:text-is('Next >')")
    await click(page, f"a.product-link:text-is('{goal.asin}')")
    assert await page.inner_text("#product-title") == Catalog.generated().products[goal.asin].title

    for value in goal.options.values():
        await click(page, f".radio-toolbar label:text-is('{value}')")
        assert await page.is_checked(f".radio-toolbar input[value='{value}']")
    await click(page, "button:text-is('Features')")
    await click(page, "button:text-is('< Prev')")
    await click(page, "button:text-is('Buy Now')")

    assert await page.inner_text("h1") == "Thank you for shopping with us!"
    assert float(await page.inner_text("#reward-value")) == 1.0
    state = await (await page.request.get(f"{episode_url}state")).json()
    assert (state["state"], state["total_reward"]) == ("terminated", 1.0)
    assert state["info"]["purchased"]["asin"] == goal.asin

    await page.goto(f"{episode_url}act?click=Back%20to%20Search")
    assert "is terminated; start a new one" in await page.inner_text("#error")
    assert float(await page.inner_text("#reward-value")) == 1.0


async def test_unknown_buttons_show_an_error_on_the_unchanged_page(web_url, page):
    await page.goto(f"{web_url}/web/new?task_id=1")
    await page.fill("#search_input", "shoes")
    await click(page, "button:text-is('Search')")
    results = await page.locator("a.product-link").all_inner_texts()
    await page.goto(page.url + "act?click=Teleport")
    assert "nothing called 'Teleport'" in await page.inner_text("#error")
    assert await page.locator("a.product-link").all_inner_texts() == results
