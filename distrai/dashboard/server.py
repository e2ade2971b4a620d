"""The dashboard's web server: static pages that fetch the records as JSON and draw them.

Nothing a participant wrote is ever put into HTML on the server: the pages are fixed files and
their script writes every field as text (`textContent`). The only server-made HTML, the error
page, escapes what it quotes. Every response carries a Content-Security-Policy that allows this
origin's scripts and styles only, so even a string that slipped through could not run. A request
never waits on the chain or a store: it reads the records `Live` refreshed last.
"""

from __future__ import annotations

import html
import logging
import math
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, ExceptionHandler, Message, Receive, Scope, Send

from distrai.dashboard.live import Live
from distrai.dashboard.records import clip
from distrai.dashboard.words import CHECKS

log = logging.getLogger("distrai.dashboard")

STATIC = Path(__file__).parent / "static"
HOTKEY = re.compile(r"[1-9A-HJ-NP-Za-km-z]{40,64}")
"""An SS58 address: base58 letters and digits."""
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}
STARTING = "the dashboard is reading the chain and the store for the first time; this page fills in shortly"


class SecurityHeaders:
    """Adds `SECURITY_HEADERS` to every HTTP response, and `no-store` to the JSON ones."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [
                    (k, v)
                    for k, v in message.get("headers", [])
                    if k.decode().lower() not in SECURITY_HEADERS
                ]
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                if scope["path"].startswith("/api/"):
                    headers.append((b"cache-control", b"no-store"))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def jsonable(value: Any) -> Any:
    """`value` with every non-finite float as None (JSON has no NaN or infinity) and every document
    (a pydantic model) as its JSON fields."""
    if isinstance(value, BaseModel):
        return jsonable(value.model_dump(mode="json"))
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def error_page(status: int, title: str, detail: str) -> HTMLResponse:
    t, d = html.escape(title), html.escape(detail)
    body = (
        f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{t}</title>"
        '<link rel=stylesheet href="/static/dashboard.css"></head><body><main class=page>'
        f'<h1>{t}</h1><p class="note wrap">{d}</p><p><a href="/">Back to the run</a></p></main></body></html>'
    )
    return HTMLResponse(body, status_code=status)


def create_app(live: Live) -> ASGIApp:
    def checked_hotkey(request: Request) -> str:
        hotkey = request.path_params["hotkey"]
        if not HOTKEY.fullmatch(hotkey):
            raise HTTPException(
                404, f"“{clip(hotkey, 80)}” is not a hotkey: an SS58 address is 40 to 64 letters and digits"
            )
        return hotkey

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def miner(request: Request) -> Response:
        checked_hotkey(request)
        return FileResponse(STATIC / "miner.html")

    async def api_run(request: Request) -> Response:
        if live.view is None:
            return JSONResponse({"error": STARTING}, status_code=503)
        return JSONResponse(jsonable(asdict(live.view)))

    async def api_miner(request: Request) -> Response:
        hotkey = checked_hotkey(request)
        if live.view is None:
            return JSONResponse({"error": STARTING}, status_code=503)
        page = live.pages.get(hotkey)
        if page is None:
            return JSONResponse(
                {"error": f"no miner has hotkey {hotkey} on the subnet or in the reports shown"},
                status_code=404,
            )
        return JSONResponse(jsonable({**asdict(page), "checks": CHECKS}))

    async def http_error(request: Request, exc: HTTPException) -> Response:
        detail = exc.detail if isinstance(exc.detail, str) else ""
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": detail}, status_code=exc.status_code)
        titles = {404: "Not found", 405: "Method not allowed"}
        return error_page(exc.status_code, titles.get(exc.status_code, "Refused"), detail)

    async def server_error(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed: %s: %s", request.method, request.url.path[:200], type(exc).__name__, exc)
        return error_page(
            500, "Something went wrong", "The dashboard could not answer this request; its log says why."
        )

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/miner/{hotkey}", miner),
            Route("/api/run", api_run),
            Route("/api/miner/{hotkey}", api_miner),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        # Starlette hands http_error only the HTTPExceptions it is registered for.
        exception_handlers={HTTPException: cast(ExceptionHandler, http_error), Exception: server_error},
    )
    return SecurityHeaders(app)
