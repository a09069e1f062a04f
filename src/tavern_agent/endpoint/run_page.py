"""The run page of ``serve``: ``GET /runs`` lists runs, ``GET /runs/<id>`` shows one.

A run is shown as ``tavern-agent runs show`` shows it (the timeline, each
call's arguments and result, spilled files, commits, child invocations), and
a running one is followed live: ``GET /runs/<id>/events`` is a stream of
server-sent events, the journal's events from the first on, then each new
one as the run writes it, until the run ends. The page renders that stream
(``run_page/run.js``), so a finished run and a running one take one path.

Every path under ``/runs`` is guarded like the endpoint: the app's origin
gate refuses pages of origins off the allow list and, on a loopback bind,
hosts that do not name this machine; then one of these must be offered:

* ``Authorization: Bearer <key>`` with the endpoint key or the extension
  host's token (what scripts and the SillyTavern extension send);
* ``?key=<key>`` on a page's address (a link): the answer is a redirect to the
  same address without it, setting a cookie that holds a random session id,
  never the key (cookies are shared by every port of a host);
* that cookie.

Everything served passes through a :class:`~tavern_agent.core.redact.Redactor`
that knows the key and the token, so neither is ever shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import json
import secrets
from collections.abc import AsyncIterator, Callable, Collection
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from tavern_agent import run_layout
from tavern_agent.core.redact import Redactor
from tavern_agent.endpoint.keys import REFUSED_KEYS
from tavern_agent.extensions.remote import HostFiles
from tavern_agent.runtime import events as ev
from tavern_agent.runtime.journal import JournalRecord, JournalTail
from tavern_agent.runtime.run import RunNotFound, all_runs, find_run
from tavern_agent.runtime.summary import run_summary
from tavern_agent.workspace.layout import DataRoot

COOKIE = "tavern_agent_runs"
POLL_SECONDS = 0.2  # how often a followed run's journal is looked at
KEEP_ALIVE_SECONDS = 10.0
MAX_SESSIONS = 64  # browsers that opened the page with ?key=; older ones open it again
ASSETS = ("run.js", "run.css", "runs.css")
SECURITY_HEADERS = {
    # No inline script or style: a result that smuggled markup could not run anything.
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def asset(name: str) -> bytes:
    """A file of the page (``run.js``, ``run.css``, ``runs.css``) as shipped in the package."""
    return resources.files("tavern_agent.endpoint").joinpath("run_page", name).read_bytes()


class RunPages:
    """The routes of the run page over one data root, opened by the given keys."""

    def __init__(
        self,
        data_dir: Path,
        key: str,
        running: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        self.data = DataRoot(data_dir)
        self.key = key
        self.host_files = HostFiles(data_dir)
        self.running = running  # ids of the runs this process is running now
        self.sessions: dict[str, None] = {}  # the newest MAX_SESSIONS, oldest first

    # ------------------------------------------------------------ the guard

    def keys(self) -> list[str]:
        """The endpoint key and, while ``serve``'s extension host is up, its token."""
        host = self.host_files.read()  # read each time: the host starts and stops apart
        return [self.key] if host is None else [self.key, host[1]]

    def _key_ok(self, given: str) -> bool:
        given = given.strip()
        if given in REFUSED_KEYS:
            return False
        return any(hmac.compare_digest(given.encode(), k.encode()) for k in self.keys() if k)

    def allowed(self, request: Request) -> bool:
        """Whether the request offers a key (the endpoint key or the host's
        token) as its bearer token, or the cookie of a session a key opened."""
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and self._key_ok(given):
            return True
        session = request.cookies.get(COOKIE, "")
        return any(hmac.compare_digest(session.encode(), s.encode()) for s in self.sessions)

    def redactor(self) -> Redactor:
        """A redactor that knows the current keys, so nothing served shows them."""
        return Redactor(self.keys())

    def refused(self) -> Response:
        """The 401 answer, saying how to offer a key."""
        text = (
            "The run page needs the endpoint key or the extension host's token: open "
            "/runs?key=KEY once, or send Authorization: Bearer KEY.\n"
        )
        return PlainTextResponse(text, 401, headers={"WWW-Authenticate": "Bearer"})

    def _login(self, request: Request) -> Response | None:
        """A redirect that trades a valid ``?key=`` for a session cookie, or None."""
        given = request.query_params.get("key")
        if given is None or not self._key_ok(given):
            return None
        session = secrets.token_urlsafe(32)
        self.sessions[session] = None
        if len(self.sessions) > MAX_SESSIONS:
            del self.sessions[next(iter(self.sessions))]
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "key"]
        target = request.url.path + (f"?{urlencode(rest)}" if rest else "")
        response = RedirectResponse(target, 303, headers={"Cache-Control": "no-store"})
        response.set_cookie(COOKIE, session, path="/runs", httponly=True, samesite="strict")
        return response

    # ------------------------------------------------------------ routes

    def routes(self) -> list[Route]:
        """The routes under ``/runs``."""
        return [
            Route("/runs", self.list_page, methods=["GET"]),
            Route("/runs.json", self.list_json, methods=["GET"]),
            Route("/runs/assets/{name}", self.assets, methods=["GET"]),
            Route("/runs/{run_id}", self.run_page, methods=["GET"]),
            Route("/runs/{run_id}/events", self.events, methods=["GET"]),
            Route("/runs/{run_id}/files/{path:path}", self.file, methods=["GET"]),
        ]

    async def list_page(self, request: Request) -> Response:
        """``GET /runs``: the runs, newest first, as an HTML table."""
        refusal = self._refusal(request, login=True)
        if refusal is not None:
            return refusal
        rows = []
        for summary in reversed(self._summaries()):
            run_id = html.escape(summary["runId"])
            status = html.escape(str(summary["status"]))
            rows.append(
                f'<tr class="{status}"><td><a href="/runs/{run_id}">{run_id}</a></td>'
                f"<td>{html.escape(str(summary.get('scene') or ''))}</td>"
                f'<td class="status">{status}</td>'
                f"<td>{summary.get('rounds') or ''}</td><td>{summary.get('commits') or ''}</td>"
                f"<td>{html.escape(str(summary.get('createdAt') or ''))}</td></tr>"
            )
        table = (
            "<table><thead><tr><th>run</th><th>scene</th><th>status</th><th>rounds</th>"
            "<th>commits</th><th>created</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
            if rows
            else "<p>(no runs)</p>"
        )
        body = _page("Runs", "runs.css", f"<h1>Runs</h1>{table}", script=False)
        return self._html(body)

    async def list_json(self, request: Request) -> Response:
        """Every run's summary; with ``?running=1`` only those this process is running."""
        if not self.allowed(request):
            return self.refused()
        if request.query_params.get("running") == "1":
            found = []
            for run_id in sorted(self.running()):
                with contextlib.suppress(RunNotFound):
                    found.append(self._summary(find_run(self.data, run_id)))
        else:
            found = self._summaries()
        return JSONResponse(self.redactor().value(found), headers=SECURITY_HEADERS)

    async def assets(self, request: Request) -> Response:
        """``GET /runs/assets/<name>``: the page's script and style sheet."""
        if not self.allowed(request):
            return self.refused()
        name = request.path_params["name"]
        if name not in ASSETS:
            return PlainTextResponse("Not found\n", 404)
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        return Response(asset(name), media_type=kind, headers=SECURITY_HEADERS)

    async def run_page(self, request: Request) -> Response:
        """``GET /runs/<id>``: one run's page, which renders its event stream."""
        run_dir = self._run_dir(request, login=True)
        if isinstance(run_dir, Response):
            return run_dir
        summary = self.redactor().value(self._summary(run_dir))
        run_id = html.escape(summary["runId"])
        spilled = "".join(
            f'<li><a href="/runs/{run_id}/files/{html.escape(p)}">{html.escape(p)}</a></li>'
            for p in spilled_files(run_dir)
        )
        main = (
            f'<p><a href="/runs">← runs</a></p><h1>{run_id}</h1>'
            f'<p class="head" data-run="{run_id}">scene {html.escape(str(summary["scene"]))} · '
            f'<span id="status" class="status">{html.escape(str(summary["status"]))}</span>'
            f' · <span id="live"></span></p>'
            '<ol id="timeline"></ol>'
            f'<h2>Spilled files</h2><ul id="spilled">{spilled or "<li>(none)</li>"}</ul>'
        )
        return self._html(_page(summary["runId"], "run.css", main, script=True))

    async def events(self, request: Request) -> Response:
        """``GET /runs/<id>/events``: the run's journal as
        server-sent events, followed until the run ends."""
        run_dir = self._run_dir(request)
        if isinstance(run_dir, Response):
            return run_dir
        headers = dict(SECURITY_HEADERS, **{"X-Accel-Buffering": "no"})
        return StreamingResponse(
            self._follow(run_dir), media_type="text/event-stream", headers=headers
        )

    async def file(self, request: Request) -> Response:
        """``GET /runs/<id>/files/<path>``: one of the run's spilled
        result files, redacted (no other path is served)."""
        run_dir = self._run_dir(request)
        if isinstance(run_dir, Response):
            return run_dir
        relative = request.path_params["path"]
        if relative not in spilled_files(run_dir):  # only the listed files, never a path
            return PlainTextResponse("Not found\n", 404)
        text = (run_dir / relative).read_bytes().decode("utf-8", "replace")
        return PlainTextResponse(self.redactor().text(text), headers=SECURITY_HEADERS)

    # ------------------------------------------------------------ helpers

    def _refusal(self, request: Request, *, login: bool = False) -> Response | None:
        """The answer instead of the route's: with ``login``, the redirect a valid
        ``?key=`` gets; the 401 without a key; ``None``: the route answers."""
        redirect = self._login(request) if login else None
        if redirect is not None:
            return redirect
        return None if self.allowed(request) else self.refused()

    def _run_dir(self, request: Request, *, login: bool = False) -> Path | Response:
        """The folder of the run the path names, or the answer instead (a refusal, 404)."""
        refusal = self._refusal(request, login=login)
        if refusal is not None:
            return refusal
        try:
            return find_run(self.data, request.path_params["run_id"])
        except RunNotFound:
            return PlainTextResponse("No such run.\n", 404)

    def _summary(self, run_dir: Path) -> dict[str, Any]:
        summary = run_summary(run_dir)
        if summary["status"] == "interrupted" and summary["runId"] in self.running():
            summary["status"] = "running"  # not ended, and this process is running it
        return summary

    def _summaries(self) -> list[dict[str, Any]]:
        return [self._summary(p) for p in all_runs(self.data)]

    def _html(self, body: str) -> Response:
        return Response(
            self.redactor().text(body),
            media_type="text/html; charset=utf-8",
            headers=SECURITY_HEADERS,
        )

    async def _follow(self, run_dir: Path) -> AsyncIterator[bytes]:
        """The journal's events as server-sent events, then each new one until the run ends."""
        tail = JournalTail(run_dir / run_layout.JOURNAL_FILE)
        redactor = self.redactor()
        quiet = 0.0
        ended = False
        while not ended:
            records = tail.new_records()
            for record in records:
                shown = redactor.value(with_arguments(run_dir, record))
                text = json.dumps(shown, ensure_ascii=False)
                yield f"id: {record.seq}\ndata: {text}\n\n".encode()
                ended = ended or isinstance(record.event, ev.RunEnded)
            if ended:
                break
            if records:
                quiet = 0.0
            elif quiet >= KEEP_ALIVE_SECONDS:
                quiet = 0.0
                yield b": keep-alive\n\n"
            await asyncio.sleep(POLL_SECONDS)
            quiet += POLL_SECONDS
        yield b"event: end\ndata: {}\n\n"


def with_arguments(run_dir: Path, record: JournalRecord) -> dict[str, Any]:
    """A record as its line's object; a call's request with its arguments inline, read from
    their file when they are large."""
    line = record.to_json()
    event = record.event
    if not isinstance(event, ev.ToolCallRequested) or event.arguments or not event.arguments_ref:
        return line
    try:
        arguments = json.loads((run_dir / event.arguments_ref).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return line
    line["payload"]["arguments"] = arguments
    return line


def spilled_files(run_dir: Path) -> list[str]:
    """Files a run's long results were spilled to (model-readable text and what replies brought).

    The per-call result records (``*.json``) are the journal's own copies, not spills.
    """
    root = run_dir / run_layout.RESULTS_DIR
    if not root.is_dir():
        return []
    found = [
        p.relative_to(run_dir).as_posix()
        for p in root.rglob("*")
        if p.is_file() and not p.name.endswith(".json")
    ]
    return sorted(found)


def _page(title: str, stylesheet: str, main: str, *, script: bool) -> str:
    js = '<script src="/runs/assets/run.js" defer></script>' if script else ""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)} · tavern-agent</title>"
        f'<link rel="stylesheet" href="/runs/assets/{stylesheet}">{js}</head>'
        f"<body><main>{main}</main></body></html>"
    )
