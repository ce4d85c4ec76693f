"""A remote Nexus registry over HTTP, as upstream's client speaks it (`<url>/v1/...`, bearer
`NEXUS_API_KEY`, `x-murmur-sha256` on every download, the status codes mapped to upstream's)."""

from __future__ import annotations

import hmac

import httpx

from murmurd.registry.archive import sha256_hex
from murmurd.registry.errors import NotFound, RegistryError
from murmurd.registry.sources.capped import read_capped, request_capped

TIMEOUT = 30.0
MAX_BYTES = 512 * 1024 * 1024
SHA_HEADER = "x-murmur-sha256"


class NexusClient:
    def __init__(self, url: str, api_key: str) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.display = self.url

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}

    def _error(self, response: httpx.Response) -> RegistryError:
        if response.status_code in (401, 403):
            return RegistryError("E-IO-003", f"registry authentication failed for {self.url}. "
                                             "Check NEXUS_API_KEY and try again.")
        try:
            text = str(response.json().get("error"))
        except (ValueError, AttributeError):
            text = response.text[:500]
        return RegistryError("E-IO-003", f"registry answered HTTP {response.status_code}: {text}")

    def download(self, name: str, version: str, platform: str | None = None) -> tuple[bytes, str]:
        """The archive bytes, verified against `x-murmur-sha256` (`E-REG-002`)."""
        query = f"?platform={platform}" if platform else ""
        with httpx.Client(timeout=TIMEOUT, follow_redirects=True) as client:
            with client.stream("GET", f"{self.url}/v1/artifacts/{name}/{version}{query}",
                               headers=self._headers()) as response:
                if response.status_code == 404:
                    raise NotFound(f"artifact {name}@{version} not found in registry",
                                   "configure a registry.sources entry in ~/.murmur/config.yaml")
                if not response.is_success:
                    raise self._error(read_capped(response))
                expected = response.headers.get(SHA_HEADER)
                if not expected:
                    raise RegistryError("E-IO-003", "registry response missing x-murmur-sha256 header")
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > MAX_BYTES:
                        raise RegistryError("E-IO-003", f"registry response larger than {MAX_BYTES} bytes")
        actual = sha256_hex(bytes(data))
        if not hmac.compare_digest(actual, expected.strip().lower()):
            raise RegistryError("E-REG-002", f"artifact integrity check failed for {name}@{version}",
                                f"registry sent sha256 {expected.strip()}, the bytes hash to {actual}")
        return bytes(data), actual

    def publish(self, name: str, version: str, runtime: str, data: bytes, platforms: list[str] = ()) -> dict:
        params = [("name", name), ("version", version), ("runtime", runtime), *(("platform", p) for p in platforms)]
        with httpx.Client(timeout=TIMEOUT, follow_redirects=True) as client:
            response = request_capped(client, "POST", f"{self.url}/v1/artifacts", params=params, content=data,
                                      headers={**self._headers(), "Content-Type": "application/octet-stream"})
        if response.status_code == 201:
            return response.json()
        if response.status_code == 409:
            raise RegistryError("E-REG-003", f"artifact {name}@{version} already exists in registry",
                                "use a new version string or remove the existing artifact")
        if response.status_code == 422:
            try:
                body = response.json()
            except ValueError:
                body = None
            if body == {"error": f"reserved artifact version '{version}' is not allowed"}:
                raise RegistryError("E-REG-004", f"version '{version}' is reserved and cannot be published",
                                    "reserved strings: latest, stable, edge — use an explicit semver version")
        raise self._error(response)

    def list(self) -> list[dict]:
        with httpx.Client(timeout=TIMEOUT, follow_redirects=True) as client:
            response = request_capped(client, "GET", f"{self.url}/v1/artifacts", headers=self._headers())
        if not response.is_success:
            raise self._error(response)
        rows = response.json()
        if not isinstance(rows, list) or not all(
                isinstance(r, dict) and all(k in r for k in ("name", "version", "runtime", "artifact_runtime"))
                for r in rows):
            raise RegistryError("E-IO-003", "registry listing is not a list of artifacts")
        return rows
