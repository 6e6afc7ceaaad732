"""The viewer's FastAPI app: read-only pages over one run folder or one store file.

    app = build_app(ViewerConfig(run_dir=Path("runs/demo")))

Pages: `/` (the run: evals, curves, steps), `/groups`, `/group?id=`, `/sessions/{id}`,
`/calls/{id}` (with the images its messages carry), `/images/{sha256}` (an image the store keeps),
`/files/{path}` (a file of the run folder, as text). Bad input gets an HTML
page with a 400 or 404 and what to do; the store is opened per request, read-only, so the
viewer keeps serving while a run writes it, and before the store exists.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from roost.rollout.store.browse_rows import Page
from roost.rollout.store.program_times import program_times
from roost.rollout.store.readable import StoreUnreadable

from . import pages
from .plots import plots
from .queries import StoreQueries
from .run_folder import OutsideRunFolder, RunFolder
from .tokens import COLOURINGS, TokenText, cells
from .trace_links import check_trace_url, trace_link

TOKEN_LIMIT = 2000  # tokens per call page
FILE_LIMIT = 1 << 20  # bytes of a run-folder file shown
MAX_OFFSET = 1 << 31


@dataclass
class ViewerConfig:
    run_dir: Path | None = None
    store: Path | None = None
    """The store file; default: the run folder's trajectories.sqlite."""
    tokenizer: Path | None = None
    """A folder with tokenizer.json; default: the run's model folder, else the calls' model if known."""
    trace_url: str | None = None
    """Where a call's trace opens, `{trace_id}` in it (Jaeger: http://127.0.0.1:16686/trace/{trace_id});
    default: trace ids shown as text."""

    def __post_init__(self) -> None:
        if self.trace_url is not None:
            check_trace_url(self.trace_url)


class PageError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class Viewer:
    """What every page reads: the run folder, the store (opened once it checks out), the tokenizer."""

    config: ViewerConfig
    renderer: pages.Renderer = field(default_factory=pages.Renderer)
    _queries: StoreQueries | None = None
    _text: TokenText | None = None

    @property
    def run(self) -> RunFolder | None:
        return RunFolder(self.config.run_dir) if self.config.run_dir is not None else None

    @property
    def store_path(self) -> Path:
        run = self.run
        return self.config.store or (run.store if run else Path("trajectories.sqlite"))

    def queries(self) -> StoreQueries:
        if self._queries is None:
            self._queries = StoreQueries(self.store_path)
        return self._queries

    def text(self, model: str) -> TokenText:
        if self._text is None:
            candidates = [self.config.tokenizer] if self.config.tokenizer else []
            candidates += self.run.tokenizer_dirs() if self.run else []
            candidates += _model_dirs(model)
            self._text = TokenText.find(candidates)
        return self._text


def _model_dirs(model: str) -> list[Path]:
    if model == "tiny":
        from roost.rollout.engine.tokenizer_files import qwen3_tokenizer_dir

        return [qwen3_tokenizer_dir()]
    return [Path(model)] if model.startswith(("/", ".")) else []


def build_app(config: ViewerConfig) -> FastAPI:
    if config.run_dir is None and config.store is None:
        raise ValueError("the viewer needs a run folder or a store file (roost view RUN_DIR, or --store FILE)")
    viewer = Viewer(config)
    app = FastAPI(title="roost view", docs_url=None, redoc_url=None, openapi_url=None)
    _errors(app, viewer)
    _routes(app, viewer)
    return app


def _errors(app: FastAPI, viewer: Viewer) -> None:
    def page(status: int, message: str) -> HTMLResponse:
        body = viewer.renderer.render("error.html", title=f"{status}", status=status, message=message)
        return HTMLResponse(body, status_code=status)

    @app.exception_handler(PageError)
    async def page_error(_: Request, exc: PageError) -> HTMLResponse:
        return page(exc.status, exc.message)

    @app.exception_handler(StoreUnreadable)
    async def unreadable(_: Request, exc: StoreUnreadable) -> HTMLResponse:
        return page(400, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> HTMLResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        return page(400, f"bad request: {problems}")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> HTMLResponse:
        return page(exc.status_code, str(exc.detail) + " (start from the run page: /)")


def _offset() -> Any:
    return Query(0, ge=0, le=MAX_OFFSET)  # a fresh one per parameter: FastAPI keeps state on it


def _routes(app: FastAPI, viewer: Viewer) -> None:
    @app.get("/health", response_class=PlainTextResponse)
    async def health() -> str:
        return "ok"

    @app.get("/", response_class=HTMLResponse)
    async def run_page() -> str:
        return await asyncio.to_thread(_run_page, viewer)

    @app.get("/groups", response_class=HTMLResponse)
    async def groups(version: str | None = None, prefix: str | None = None, offset: int = _offset()) -> str:
        page = Page(offset, 50)
        rows = await asyncio.to_thread(lambda: viewer.queries().groups(page, version=version, prefix=prefix))
        what = f"played on weights v{version}" if version is not None else f"starting {prefix!r}" if prefix else ""
        query = "".join(f"{k}={v}&" for k, v in (("version", version), ("prefix", prefix)) if v is not None)
        return viewer.renderer.render(
            "groups.html", title=f"Groups {what}".strip(), rows=rows, page=page, url=f"/groups?{query}"
        )

    @app.get("/group", response_class=HTMLResponse)
    async def group(id: str = Query(..., min_length=1, max_length=512), offset: int = _offset()) -> str:
        return await asyncio.to_thread(_group_page, viewer, id, Page(offset, 16))

    @app.get("/sessions/{session_id}", response_class=HTMLResponse)
    async def session(session_id: str, offset: int = _offset()) -> str:
        return await asyncio.to_thread(_session_page, viewer, session_id, Page(offset, 500))

    @app.get("/calls/{call_id}", response_class=HTMLResponse)
    async def call(
        call_id: str, start: int = _offset(), colour: Literal["logprob", "advantage", "reward"] = "logprob"
    ) -> str:
        return await asyncio.to_thread(_call_page, viewer, call_id, start, colour)

    @app.get("/images/{sha256}", response_class=Response)
    async def image(sha256: str = PathParam(..., pattern="^[0-9a-f]{64}$")) -> Response:
        """An image a call sent, by its content address (the store keeps each once)."""
        record = await asyncio.to_thread(viewer.queries().image, sha256)
        if record is None:
            raise PageError(404, f"no image {sha256} in {viewer.store_path}")
        return Response(record.data, media_type=record.media_type, headers={"cache-control": "max-age=86400"})

    @app.get("/files/{relative:path}", response_class=PlainTextResponse)
    async def run_file(relative: str) -> str:
        return await asyncio.to_thread(_file_text, viewer, relative)


def _run_page(viewer: Viewer) -> str:
    notes, store_error, steps = [], None, []
    run = viewer.run
    evals: dict[str, Any] = {}
    stage_plots = []
    if run is not None:
        evals, note = run.evals()
        notes += [note] if note else []
        metrics = run.metrics()
        if metrics.bad_lines:
            notes.append(
                f"metrics.jsonl: {metrics.bad_lines} line(s) could not be read (a run still writing, "
                "or cut short); the rest are plotted"
            )
        stage_plots = [(stage, p) for stage, rows in metrics.by_stage.items() if (p := plots(rows))]
    try:
        steps = viewer.queries().steps()
    except StoreUnreadable as exc:
        store_error = str(exc)
    title = f"Run {run.root}" if run is not None else f"Store {viewer.store_path}"
    return viewer.renderer.render(
        "run.html",
        title=title,
        notes=notes,
        store_error=store_error,
        steps=steps,
        evals={k: v for k, v in evals.items() if isinstance(v, dict)},
        plots=stage_plots,
        files=run.listing() if run else [],
    )


def _group_page(viewer: Viewer, group_id: str, page: Page) -> str:
    q = viewer.queries()
    rows = q.sessions(page, group_id=group_id)
    if not rows and page.offset == 0:
        raise PageError(404, f"no group {group_id!r} in {viewer.store_path}; the groups page lists those it holds")
    episodes = [{"row": r, "calls": q.calls(r.session_id, Page(0, 100))} for r in rows]
    return viewer.renderer.render(
        "group.html", title=f"Group {group_id}", episodes=episodes, page=page, url=f"/group?id={group_id}&"
    )


def _session_page(viewer: Viewer, session_id: str, page: Page) -> str:
    q = viewer.queries()
    s = q.session(session_id)
    if s is None:
        raise PageError(
            404, f"no session {session_id!r} in {viewer.store_path}; open its group to see the sessions the store holds"
        )
    calls = q.calls(session_id, page)
    timed = q.call_timings(session_id)
    return viewer.renderer.render(
        "session.html",
        title=f"Session {session_id}",
        s=s,
        rewards=q.rewards(session_id),
        time_rows=pages.time_rows(program_times(timed)),
        call_times=pages.call_times(timed),
        trees=pages.trees(q.agents(session_id), calls),
        page=page,
        more_calls=len(calls) == page.limit,
    )


def _call_page(viewer: Viewer, call_id: str, start: int, colour: str) -> str:
    q = viewer.queries()
    detail = q.call_detail(call_id)
    window = q.call_tokens(call_id, start, TOKEN_LIMIT)
    if detail is None or window is None:
        raise PageError(404, f"no call {call_id!r} in {viewer.store_path}; a session's page links its calls")
    text = viewer.text(detail.model)
    score = _score(q, detail, colour)
    token_cells = cells(
        text.texts(window.ids),
        window.ids,
        window.logprobs,
        start=window.start,
        prompt_len=window.prompt_len,
        shared=detail.row.shared_prefix_len,
        version=detail.row.weight_version,
        colouring=colour,
        score=score,
    )
    shown, notes = pages.messages(detail.request)
    if start >= window.total > 0:
        notes.append(f"the call has {window.total} tokens; start={start} is past its end")
    return viewer.renderer.render(
        "call.html",
        title=f"Call {call_id}",
        notes=notes,
        c=detail,
        messages=shown,
        reply=pages.reply_view(detail.response),
        w=window,
        cells=token_cells,
        colour=colour,
        colourings=COLOURINGS,
        limit=TOKEN_LIMIT,
        tokenizer=str(text.folder) if text.folder else None,
        trace_link=trace_link(viewer.config.trace_url, detail.trace.get("trace_id", "")),
    )


def _score(q: StoreQueries, detail: Any, colour: str) -> list[float] | float | None:
    """What colours the sampled tokens besides logprob: the call's advantage (per token when posted
    so), or its reward, else the session's return."""
    if colour == "advantage":
        return detail.per_token_advantage or detail.row.advantage
    if colour == "reward":
        if detail.row.reward is not None:
            return detail.row.reward
        session = q.session(detail.row.session_id)
        return session.ret if session else None
    return None


def _file_text(viewer: Viewer, relative: str) -> str:
    run = viewer.run
    if run is None:
        raise PageError(404, "the viewer was started on a store file, not a run folder: it serves no files")
    try:
        path = run.file(relative)
    except OutsideRunFolder as exc:
        raise PageError(404, str(exc)) from exc
    with path.open("rb") as f:
        data = f.read(FILE_LIMIT)
    return data.decode("utf-8", errors="replace")
