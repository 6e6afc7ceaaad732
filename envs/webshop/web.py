"""Web mode: the shop's HTML pages, served next to the env server's JSON API.

    python -m roost.envs.webshop.web --port 8000        # JSON API + pages, on one server
    open http://127.0.0.1:8000/web                      # pick a task, shop in the browser

Routes (added to the env server's app by `web_router(manager)`):

    GET  /web                      start page: a form that opens an episode
    GET  /web/new?task_id=&split=&seed=    create an episode, redirect to its page
    GET  /web/{episode}/           the episode's current page (HTML)
    POST /web/{episode}/act        a form: `search_query=...` or `click=...`; redirects to the page
    GET  /web/{episode}/act?click=...      the same for links and option radios
    GET  /web/{episode}/state      JSON: the episode's status and its last `info` (reward, purchase)

Every page action is a step of the same episode through the `EpisodeManager`, so leases,
capacity, metrics and `GET /episodes/{id}` see browser episodes like any other. A move
the page does not offer shows the error on the page and changes nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import html as html_lib
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse

from roost.envs.episodes import EpisodeManager, ManagerConfig
from roost.envs.errors import EnvError, EpisodeFinishedError, InvalidActionError
from roost.envs.protocol import TextAction

MAX_PAGES = 4096

START_PAGE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>WebShop</title></head>
<body><h2>WebShop</h2>
<form method="get" action="/web/new">
<label>Task id <input name="task_id" id="task_id"></label>
<label>or split <select name="split"><option>test</option><option>eval</option><option>train</option></select></label>
<button type="submit" id="start">Start shopping</button>
</form></body></html>"""


@dataclass
class WebPage:
    html: str
    info: dict[str, Any]
    flash: str | None = None


@dataclass
class WebPages:
    """The last page of each browser episode (bounded; the oldest are forgotten first)."""

    limit: int = MAX_PAGES
    pages: OrderedDict[str, WebPage] = field(default_factory=OrderedDict)

    def put(self, episode_id: str, info: dict[str, Any]) -> None:
        info = dict(info)
        html = info.pop("html", "")
        self.pages[episode_id] = WebPage(html, info)
        self.pages.move_to_end(episode_id)
        while len(self.pages) > self.limit:
            self.pages.popitem(last=False)

    def get(self, episode_id: str) -> WebPage | None:
        return self.pages.get(episode_id)


def web_router(manager: EpisodeManager) -> APIRouter:
    router = APIRouter()
    pages = WebPages()

    @router.get("/web", response_class=HTMLResponse)
    async def start() -> str:
        return START_PAGE

    @router.get("/web/new")
    async def new(task_id: str | None = None, split: str | None = None, seed: int | None = None):
        try:
            episode_id, reset = await manager.create(
                task_id=task_id or None, seed=seed, split=split or None, options={"html": True}
            )
        except EnvError as exc:
            return _error_page(400, f"could not start an episode: {exc}")
        pages.put(episode_id, reset.info)
        return RedirectResponse(f"/web/{episode_id}/", status_code=303)

    @router.get("/web/{episode_id}/", response_class=HTMLResponse)
    async def page(episode_id: str):
        page = pages.get(episode_id)
        if page is None:
            return _error_page(
                404,
                f"no browser episode {episode_id!r} here; episodes started through the JSON "
                "API have no pages. Start one at /web/new?task_id=...",
            )
        html, page.flash = _with_flash(page.html, page.flash), None
        return HTMLResponse(html)

    @router.post("/web/{episode_id}/act")
    async def act_form(episode_id: str, request: Request):
        form = await request.form()
        return await _act(episode_id, {k: str(v) for k, v in form.items()})

    @router.get("/web/{episode_id}/act")
    async def act_link(episode_id: str, click: str):
        return await _act(episode_id, {"click": click})

    @router.get("/web/{episode_id}/state")
    async def state(episode_id: str) -> JSONResponse:
        page = pages.get(episode_id)
        record = manager.get(episode_id)
        return JSONResponse(
            {
                "episode_id": episode_id,
                "state": record.state,
                "steps": record.steps,
                "total_reward": record.total_reward,
                "info": page.info if page else None,
            }
        )

    async def _act(episode_id: str, fields: dict[str, str]):
        page = pages.get(episode_id)
        if page is None:
            return _error_page(404, f"no browser episode {episode_id!r} here; start one at /web/new")
        if "search_query" in fields:
            action = f"search[{fields['search_query']}]"
        elif "click" in fields:
            action = f"click[{fields['click']}]"
        else:
            page.flash = f"the form sent {sorted(fields)}; expected search_query or click"
            return RedirectResponse(f"/web/{episode_id}/", status_code=303)
        try:
            step = await manager.step(episode_id, TextAction(action))
        except (InvalidActionError, EpisodeFinishedError) as exc:
            page.flash = str(exc)
        else:
            pages.put(episode_id, step.info)
            if step.truncated:
                pages.get(episode_id).flash = "out of steps: the episode ended without a purchase"
        return RedirectResponse(f"/web/{episode_id}/", status_code=303)

    return router


def _with_flash(html: str, flash: str | None) -> str:
    if not flash:
        return html
    return html.replace("<body>", f'<body>\n<p class="error" id="error">{html_lib.escape(flash)}</p>', 1)


def _error_page(status: int, message: str) -> HTMLResponse:
    body = f'<!DOCTYPE html><html><body><p class="error" id="error">{html_lib.escape(message)}</p></body></html>'
    return HTMLResponse(body, status_code=status)


def build_web_app(
    env_kwargs: dict[str, Any] | None = None, manager_config: ManagerConfig = ManagerConfig(), env: str = "webshop"
):
    """The env server's app (JSON API) with the web routes added."""
    from roost.envs.http_app import create_app
    from roost.envs.worker import WorkerConfig

    manager = EpisodeManager(WorkerConfig(env, env_kwargs or {}), manager_config)
    app = create_app(manager)
    app.include_router(web_router(manager))
    return app


def main(argv: list[str] | None = None) -> None:
    import uvicorn

    from roost.envs.serve import parse_env_args
    from roost.serving.listen import PORT_FILE_HELP, bind_listener, report_port

    parser = argparse.ArgumentParser(prog="python -m roost.envs.webshop.web", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port (see --port-file)")
    parser.add_argument("--port-file", type=Path, help=PORT_FILE_HELP)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--max-episodes", type=int, default=ManagerConfig.max_episodes)
    parser.add_argument("--lease-s", type=float, default=ManagerConfig.lease_s)
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    app = build_web_app(
        parse_env_args(args.env_arg),
        ManagerConfig(workers=args.workers, max_episodes=args.max_episodes, lease_s=args.lease_s),
    )
    sock = bind_listener(args.host, args.port)
    report_port(sock, args.port_file)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()
