"""murmur-tool-fetch: GET a URL through `wasi:http` and return readable text.

The host grants `wasi:http` only under the capsule's `network` grant, so without one every
request fails with the WASI error `HTTP-request-denied`, reported as the tool's error. Redirects
are followed (at most `MAX_REDIRECTS`); the body is read up to `MAX_BODY_BYTES`; HTML is reduced
to its visible text (scripts, styles and markup dropped, block elements as line breaks); the
text returned is capped at `max_chars` and marked truncated past it. A status of 400 or more is
a failed call naming the status, with the start of the body as the reason.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from urllib.parse import urljoin, urlsplit

from componentize_py_types import Err, Ok
from wit_world import exports
from wit_world.exports import run
from wit_world.imports import outgoing_handler, streams, types

MAX_REDIRECTS = 5
MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_CHARS = 64 * 1024
_SKIPPED_TAGS = {"script", "style", "noscript", "template", "svg"}
_BLOCK_TAGS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "section", "article",
               "header", "footer", "blockquote", "ul", "ol", "table", "title"}


class Failed(Exception):
    """A fetch that did not produce text; `status` is the tool status to report."""

    def __init__(self, status: run.Status, message: str) -> None:
        super().__init__(message)
        self.status = status


class _TextExtractor(HTMLParser):
    """Visible text of an HTML document, one block element per line."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._skipping = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping += 1
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED_TAGS:
            self._skipping = max(self._skipping - 1, 0)
        elif tag in _BLOCK_TAGS:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(data)


def html_to_text(html: str) -> str:
    parser = _TextExtractor()
    parser.feed(html)
    parser.close()
    lines = (re.sub(r"[ \t\r\f\v]+", " ", line).strip() for line in "".join(parser.parts).split("\n"))
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _case_name(code: object) -> str:
    """`ErrorCode_HttpRequestDenied()` -> `HTTP-request-denied` (the WIT case name)."""
    words = re.findall(r"[A-Z][a-z0-9]*", type(code).__name__.split("_", 1)[-1])
    return "-".join({"http": "HTTP", "dns": "DNS", "tls": "TLS"}.get(w.lower(), w.lower()) for w in words)


def _read_body(response: types.IncomingResponse) -> tuple[bytes, bool]:
    """The body up to MAX_BODY_BYTES, and whether there was more."""
    chunks: list[bytes] = []
    size = 0
    with response.consume() as body:
        with body.stream() as stream:
            while size <= MAX_BODY_BYTES:
                try:
                    chunk = stream.blocking_read(65536)
                except Err as exc:
                    if isinstance(exc.value, streams.StreamError_Closed):
                        return b"".join(chunks), False
                    raise Failed(run.Status.ERROR, f"the response body broke off: {exc.value}") from None
                chunks.append(chunk)
                size += len(chunk)
    return b"".join(chunks)[:MAX_BODY_BYTES], True


def _header(response: types.IncomingResponse, name: str) -> str | None:
    with response.headers() as headers:
        values = headers.get(name)
    return values[0].decode("latin-1") if values else None


def _get(url: str) -> types.IncomingResponse:
    parts = urlsplit(url)
    request = types.OutgoingRequest(types.Fields())
    request.set_method(types.Method_Get())
    request.set_scheme(types.Scheme_Https() if parts.scheme == "https" else types.Scheme_Http())
    request.set_authority(parts.netloc)
    request.set_path_with_query((parts.path or "/") + (f"?{parts.query}" if parts.query else ""))
    try:
        future = outgoing_handler.handle(request, None)
    except Err as exc:
        raise Failed(run.Status.ERROR, f"GET {url}: error-code {_case_name(exc.value)}") from None
    with future:
        with future.subscribe() as pollable:
            pollable.block()
        outcome = future.get()
    if outcome is None or not isinstance(outcome, Ok):
        raise Failed(run.Status.ERROR, f"GET {url}: no response")
    if isinstance(outcome.value, Err):
        raise Failed(run.Status.ERROR, f"GET {url}: error-code {_case_name(outcome.value.value)}")
    return outcome.value.value


def _check_url(url: object) -> str:
    if not isinstance(url, str):
        raise Failed(run.Status.FAILED, "`url` must be a string")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Failed(run.Status.FAILED, f"not an http(s) URL: {url!r}")
    return url


def fetch(url: str) -> tuple[str, int, str, bytes, bool]:
    """(final URL, status, content type, body, body cut short), following redirects."""
    for _ in range(MAX_REDIRECTS + 1):
        response = _get(url)
        with response:
            status = response.status()
            location = _header(response, "location")
            if 300 <= status < 400 and location:
                url = _check_url(urljoin(url, location))
                continue
            content_type = _header(response, "content-type") or ""
            body, cut = _read_body(response)
        return url, status, content_type, body, cut
    raise Failed(run.Status.FAILED, f"more than {MAX_REDIRECTS} redirects, last to {url}")


def readable(content_type: str, body: bytes) -> str:
    charset = re.search(r"charset=([\w-]+)", content_type)
    try:
        text = body.decode(charset.group(1) if charset else "utf-8", "replace")
    except LookupError:
        text = body.decode("utf-8", "replace")
    looks_html = "html" in content_type or text.lstrip()[:15].lower().startswith(("<!doctype html", "<html"))
    return html_to_text(text) if looks_html else text


def _request(data: str | None) -> tuple[str, int]:
    try:
        value = json.loads(data or "")
    except ValueError:
        value = {"url": (data or "").strip()}
    if not isinstance(value, dict):
        raise Failed(run.Status.FAILED, 'the input must be {"url": ...}')
    limit = value.get("max_chars", MAX_CHARS)
    if not isinstance(limit, int) or limit < 1:
        raise Failed(run.Status.FAILED, "`max_chars` must be a positive integer")
    return _check_url(value.get("url")), min(limit, MAX_CHARS)


class Run(exports.Run):
    def run(self, input: run.ToolInput) -> run.ToolResult:
        try:
            url, limit = _request(input.data)
            final, status, content_type, body, cut = fetch(url)
        except Failed as exc:
            return run.ToolResult(exc.status, str(exc), None, None, False, [])
        text = readable(content_type, body)
        meta = [("status", str(status)), ("url", final), ("content_type", content_type)]
        if status >= 400:
            return run.ToolResult(run.Status.FAILED, f"GET {final}: HTTP {status}", text[:500], None, False, meta)
        truncated = cut or len(text) > limit
        if len(text) > limit:
            text = text[:limit] + f"\n[truncated at {limit} characters]"
        return run.ToolResult(run.Status.PASSED, f"GET {final}: HTTP {status}, {len(body)} bytes", text, None,
                              truncated, meta)
