"""The supervisor's console at `/console`: one static page (HTML, a small vanilla JS file and
CSS, shipped as package data; no CDN, no build step) that talks to the daemon it is served by,
over the same JSON-RPC endpoint and GET streams any other client uses.

The page renders every untrusted string (model output, tool output, peer messages) with
`textContent`; the Content-Security-Policy below is the second wall: no inline script, nothing
loaded from another origin.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from starlette.responses import Response
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
       "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache"}


class _ConsoleFiles(StaticFiles):
    """The console's static files, each answered with the security headers."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        response = await super().get_response(path, scope)
        response.headers.update(SECURITY_HEADERS)
        return response


def static_dir() -> str:
    return str(resources.files(__package__) / "static")


def add_console(app: FastAPI) -> None:
    """Serve the console at `/console/` (StaticFiles redirects `/console` there)."""
    app.mount("/console", _ConsoleFiles(directory=static_dir(), html=True), name="console")
