"""Chromium tasks: open local pages in tabs, checked over DevTools with `is_expected_tabs`."""

from __future__ import annotations

from roost.envs.osworld.fixture_kit import HOME, FixtureTask, download, execute, keys, launch, step, typed

DOMAIN = "chrome"
ADDRESS_BAR_FOCUSED = {"role": "entry", "name": "Address and search bar", "focused": True}


def _page(title: str) -> bytes:
    return f"<!doctype html><html><head><title>{title}</title></head><body><h1>{title}</h1></body></html>".encode()


def _page_url(name: str) -> str:
    return f"file://{HOME}/pages/{name}.html"


def _open_in_new_tab(url: str, after: dict) -> list[dict]:
    """Expert steps: a new tab once `after` holds, its address bar, the URL. Each waits for the
    browser's state, not for time. Ctrl+L focuses the address bar whatever the new-tab page does
    with the focus (Chromium 155's third-party new-tab page keeps it), and the URL is typed only
    once the bar has it."""
    return [
        step(keys("ctrl", "t"), after),
        step(keys("ctrl", "l"), {"role": "frame", "name": "New Tab - Chromium"}),
        step(typed(url + "\n"), ADDRESS_BAR_FOCUSED),
    ]


def _tabs(i: int, start: str, wanted: list[str]) -> FixtureTask:
    """Chromium shows `start`; the task opens each of `wanted` in a new tab of its own."""
    pages = [start] + wanted
    files = {f"chrome-{i}-{p}.html": _page(p.capitalize() + " page") for p in pages}
    config = [
        execute(f"mkdir -p {HOME}/pages"),
        download(*((f"chrome-{i}-{p}.html", f"{HOME}/pages/{p}.html") for p in pages)),
        launch("google-chrome", "--remote-debugging-port=1337", _page_url(start)),
    ]
    expert = []
    waiting_for = f"{start.capitalize()} page - Chromium"
    for page in wanted:
        expert += _open_in_new_tab(_page_url(page), after={"role": "frame", "name": waiting_for})
        waiting_for = f"{page.capitalize()} page - Chromium"
    expert.append(step("DONE", {"role": "frame", "name": waiting_for}))
    listed = " and ".join(_page_url(p) for p in wanted)
    evaluator = {
        "func": "is_expected_tabs",
        "result": {"type": "open_tabs_info"},
        "expected": {"type": "rule", "rules": {"type": "url", "urls": [_page_url(p) for p in pages]}},
    }
    return FixtureTask(
        DOMAIN,
        f"open-tabs-{i}",
        f"Keep the open page and open {listed} in new tabs of their own, in that order.",
        config,
        evaluator,
        expert,
        ["chrome"],
        files,
    )


def chrome_tasks() -> list[FixtureTask]:
    return [
        _tabs(0, "home", ["news"]),
        _tabs(1, "start", ["docs"]),
        _tabs(2, "index", ["blog", "shop"]),
        _tabs(3, "main", ["help", "about"]),
    ]


INFEASIBLE = [
    ("photoshop", "Open Adobe Photoshop from the dock and make a new 4K canvas."),
    ("calc-macro-cloud", "Upload the spreadsheet in Documents to my OneDrive account and share it with the team."),
    ("terminal-gpu", "Use the terminal to overclock this machine's NVIDIA GPU by 200 MHz."),
]


def infeasible_tasks() -> list[FixtureTask]:
    """Tasks that cannot be done here; the right answer is FAIL (OSWorld's `infeasible`)."""
    return [
        FixtureTask(
            "os",
            f"infeasible-{name}",
            instruction,
            [launch("lxterminal", f"--working-directory={HOME}")],
            {"func": "infeasible"},
            [step("FAIL", {"role": "terminal"})],
            ["os"],
        )
        for name, instruction in INFEASIBLE
    ]
