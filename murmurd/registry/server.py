"""`murmurd registry serve DIR`: the Nexus HTTP API upstream's client speaks, over a store directory.

`GET /v1/artifacts` lists, `GET /v1/artifacts/{name}/{version}[?platform=os-arch]` returns the
archive with `x-murmur-sha256`, `POST /v1/artifacts?name&version&runtime[&platform]` publishes
(201; 409 for an existing version; 422 for a reserved one). Every request needs
`Authorization: Bearer <NEXUS_API_KEY>` (401 `{"error":"unauthorized"}`). The directory has the
global store's layout, so it can also be read as one. Names and versions are checked before they
touch a path; an upload is capped and its own manifest must agree with the query.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import Mapping
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from murmurd.registry.archive import open_archive, role_of, sha256_hex
from murmurd.registry.errors import NotFound, RegistryError
from murmurd.registry.stores import PLATFORMS, Store, check_component, meta_for
from murmurd.registry.versions import is_reserved

DEFAULT_BIND = "127.0.0.1:7800"
MAX_UPLOAD = 512 * 1024 * 1024
RUNTIMES = ("wasm", "native", "static")


def _error(status: int, text: str) -> JSONResponse:
    return JSONResponse({"error": text}, status_code=status)


def create_app(directory: Path, api_key: str, *, env: Mapping[str, str] = os.environ,
               max_upload: int = MAX_UPLOAD) -> Starlette:
    if not api_key:
        raise ValueError("NEXUS_API_KEY is required to serve a registry")
    store = Store(directory, "registry")
    expected = f"Bearer {api_key}".encode()
    lock = asyncio.Lock()  # one publish at a time: the existence check and the write are one step

    def authorized(request: Request) -> bool:
        return hmac.compare_digest(request.headers.get("authorization", "").encode(), expected)

    async def listing(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "unauthorized")
        return JSONResponse(await asyncio.to_thread(store.entries))

    async def fetch(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "unauthorized")
        name, version = request.path_params["name"], request.path_params["version"]
        platform = request.query_params.get("platform")
        try:
            for kind, value in (("name", name), ("version", version)):
                check_component(kind, value)
            stored = store.lookup(name, version, platform or "unknown")
            data = await asyncio.to_thread(stored.read_verified)
        except NotFound:
            suffix = f" has no variant for platform '{platform}'" if platform else " not found"
            return _error(404, f"artifact '{name}@{version}'{suffix}")
        except RegistryError as exc:
            return _error(400 if exc.code == "E-IO-003" else 500, exc.message)
        return Response(data, media_type="application/octet-stream", headers={"x-murmur-sha256": stored.sha256})

    async def publish(request: Request) -> Response:
        if not authorized(request):
            return _error(401, "unauthorized")
        query = request.query_params
        name, version, runtime = query.get("name", ""), query.get("version", ""), query.get("runtime", "")
        platforms = query.getlist("platform")
        if is_reserved(version):
            return _error(422, f"reserved artifact version '{version}' is not allowed")
        try:
            for kind, value in (("name", name), ("version", version)):
                check_component(kind, value)
        except RegistryError as exc:
            return _error(400, exc.message)
        if runtime not in RUNTIMES:
            return _error(400, f"invalid runtime '{runtime}' (expected wasm|native|static)")
        if any(p not in PLATFORMS for p in platforms) or len(platforms) > 1:
            return _error(400, f"invalid platform {platforms} (one of {', '.join(PLATFORMS)})")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_upload:
                return _error(413, f"artifact larger than {max_upload} bytes")
        data = bytes(body)
        try:
            archive = await asyncio.to_thread(open_archive, data, env)
        except RegistryError as exc:
            return _error(400, f"not a valid .mur.zip: {exc.message}")
        own = archive.manifest
        if (own.name, own.version) != (name, version):
            return _error(400, f"the archive's murmur.yaml says {own.name}@{own.version}, not {name}@{version}")
        digest = sha256_hex(data)
        meta = meta_for(runtime, role_of(own), name, version, platforms, own.description or None, list(own.tags))
        platform = platforms[0] if platforms else None
        async with lock:
            try:
                await asyncio.to_thread(store.put, name, version, data, digest, meta, platform=platform,
                                        overwrite=False)
            except RegistryError as exc:
                if exc.code == "E-REG-003":
                    return _error(409, f"artifact '{name}@{version}' already exists")
                return _error(400, exc.message)
        return JSONResponse({"artifact_id": f"{name}@{version}", "sha256": digest}, status_code=201)

    return Starlette(routes=[
        Route("/v1/artifacts", listing, methods=["GET"]),
        Route("/v1/artifacts", publish, methods=["POST"]),
        Route("/v1/artifacts/{name}/{version}", fetch, methods=["GET"]),
    ])


def parse_bind(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"NEXUS_BIND must be host:port, not {value!r}")
    return host.strip("[]"), int(port)
