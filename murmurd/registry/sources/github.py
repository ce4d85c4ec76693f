"""GitHub release sources, as upstream's client: the releases API (base overridable with
`MUR_GITHUB_API_BASE`), upstream's tag scheme and asset names, and asset bytes fetched from the
API's asset endpoint (never `browser_download_url`, whose redirect would drop the token)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from murmurd.registry.errors import NotFound, RegistryError
from murmurd.registry.sources.capped import request_capped

DEFAULT_BASE = "https://api.github.com"
TIMEOUT = 30.0
MAX_ASSET_BYTES = 512 * 1024 * 1024
_VAR = re.compile(r"^\$\{([A-Z_][A-Z0-9_]*)\}$")


def api_base(env: Mapping[str, str] = os.environ) -> str:
    value = env.get("MUR_GITHUB_API_BASE", "").strip().rstrip("/")
    return value or DEFAULT_BASE


def resolve_token(configured: str | None, env: Mapping[str, str] = os.environ) -> str | None:
    """`${VAR}` is that variable, a bare set variable's name its value, else the literal; then `GITHUB_TOKEN`."""
    if configured:
        match = _VAR.match(configured)
        if match:
            value = env.get(match.group(1))
            if value:
                return value
        elif configured in env and env[configured]:
            return env[configured]
        else:
            return configured
    return env.get("GITHUB_TOKEN") or None


@dataclass(frozen=True)
class Asset:
    id: int
    name: str


@dataclass(frozen=True)
class Download:
    name: str  # the asset's file name
    data: bytes
    origin: str  # github:<owner>/<repo>@<tag>


class GitHubSource:
    def __init__(self, repo: str, token: str | None = None, env: Mapping[str, str] = os.environ,
                 *, name: str | None = None) -> None:
        if repo.count("/") != 1 or not all(repo.split("/")):
            raise RegistryError("E-IO-003", f"invalid github repo '{repo}' (expected owner/repo)")
        self.repo = repo
        self.token = token
        self.base = api_base(env)
        self.display = f"github:{repo}"
        self.name = name or self.display

    def _headers(self, accept: str) -> dict[str, str]:
        headers = {"User-Agent": "murmur-cli", "Accept": accept}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _release(self, client: httpx.Client, path: str) -> tuple[str, list[Asset]] | None:
        response = request_capped(client, "GET", f"{self.base}/repos/{self.repo}/releases/{path}",
                                  headers=self._headers("application/vnd.github+json"))
        if response.status_code == 404:
            return None
        if not response.is_success:
            raise RegistryError("E-IO-003", f"HTTP {response.status_code}: {response.text[:500]}")
        try:
            body = response.json()
            assets = [Asset(int(a["id"]), str(a["name"])) for a in body.get("assets", [])]
            return str(body.get("tag_name", path)), assets
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RegistryError("E-IO-003", f"unreadable release JSON: {exc}") from None

    def _asset(self, client: httpx.Client, asset: Asset, tag: str) -> Download:
        with client.stream("GET", f"{self.base}/repos/{self.repo}/releases/assets/{asset.id}",
                           headers=self._headers("application/octet-stream")) as response:
            if not response.is_success:
                raise RegistryError("E-IO-003", f"HTTP {response.status_code} fetching asset {asset.name}")
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > MAX_ASSET_BYTES:
                    raise RegistryError("E-IO-003", f"asset {asset.name} is larger than {MAX_ASSET_BYTES} bytes")
        return Download(asset.name, bytes(data), f"{self.display}@{tag}")

    def _client(self) -> httpx.Client:
        return httpx.Client(timeout=TIMEOUT, follow_redirects=True)

    def fetch(self, name: str, version: str | None, platform: str) -> Download:
        """`name@version` (tag `version`, else `v<version>`, else the latest release), or the latest
        release's asset for a bare name (`version` None or `latest`)."""
        with self._client() as client:
            if version and version.lower() != "latest":
                wanted = [f"{name}-{version}-{platform}.mur.zip", f"{name}-{version}.mur.zip"]
                tags = [version] + ([f"v{version}"] if not version.startswith("v") else [])
                for tag in tags:
                    release = self._release(client, f"tags/{tag}")
                    if release is not None:
                        found = _pick_exact(release[1], wanted)
                        if found is not None:
                            return self._asset(client, found, release[0])
                        break
                latest = self._release(client, "latest")
                found = _pick_exact(latest[1], wanted) if latest else None
                if latest is None or found is None:
                    raise NotFound(f"no release asset {wanted[-1]} in {self.display}")
                return self._asset(client, found, latest[0])
            latest = self._release(client, "latest")
            found = _pick_latest(latest[1], name, platform) if latest else None
            if latest is None or found is None:
                raise NotFound(f"no {name} asset in the latest release of {self.display}")
            return self._asset(client, found, latest[0])

    def fetch_tag(self, tag: str) -> list[Download]:
        """`github:<owner>/<repo>@<tag>`: every `.mur.zip` asset of that exact tag."""
        with self._client() as client:
            release = self._release(client, f"tags/{tag}")
            assets = [a for a in (release[1] if release else []) if a.name.endswith(".mur.zip")]
            if not assets:
                raise NotFound(f"no .mur.zip assets in {self.display}@{tag}")
            return [self._asset(client, a, release[0]) for a in assets]  # type: ignore[index]


def _pick_exact(assets: list[Asset], wanted: list[str]) -> Asset | None:
    for name in wanted:
        for asset in assets:
            if asset.name == name:
                return asset
    return None


def _pick_latest(assets: list[Asset], name: str, platform: str) -> Asset | None:
    for asset in assets:
        if asset.name.startswith(f"{name}-") and asset.name.endswith(f"-{platform}.mur.zip"):
            return asset
    exact = _pick_exact(assets, [f"{name}.mur.zip"])
    if exact is not None:
        return exact
    return next((a for a in assets if a.name.startswith(f"{name}-") and a.name.endswith(".mur.zip")), None)
