"""`serve --public-url`: the agent card names the address callers reach, not the bound one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from a2akit import chaos_capsule, serving
from murmurd.a2a.http.public_url import BadPublicUrl, check_public_url


def test_the_card_advertises_the_public_url_in_every_shape(tmp_path: Path, artifacts) -> None:
    artifacts.fixture("chaos-driver")
    capsule = chaos_capsule(tmp_path)
    public = "https://agents.example.com/capsules/chaos"
    with serving(capsule, tmp_path / "state", "--public-url", public) as served:
        card = httpx.get(f"{served.url.rstrip('/')}/.well-known/agent-card.json", timeout=10).json()
        # the daemon still answers where it is bound; only the card's address changes
        reply = httpx.post(served.url.rstrip("/") + "/", json={"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                                                   "params": {"id": "tsk_" + "0" * 32}}, timeout=10)
    assert card["url"] == public + "/"
    assert {entry["url"] for entry in card["supportedInterfaces"]} == {public + "/"}
    assert {entry["url"] for entry in card["additionalInterfaces"]} == {public + "/"}
    assert "error" in reply.json()


def test_without_it_the_card_names_the_bound_address(tmp_path: Path, artifacts) -> None:
    artifacts.fixture("chaos-driver")
    capsule = chaos_capsule(tmp_path)
    with serving(capsule, tmp_path / "state") as served:
        card = httpx.get(f"{served.url.rstrip('/')}/.well-known/agent-card.json", timeout=10).json()
    assert card["url"].rstrip("/") == served.url.rstrip("/")


@pytest.mark.parametrize("value, says", [
    ("ftp://example.com/", "scheme must be http or https"),
    ("https://", "no host"),
    ("https://user:pw@example.com/", "user info"),
    ("https://example.com/?a=1", "no query or fragment"),
    ("https://example.com/#top", "no query or fragment"),
    ("https://example.com:99999/", "not a URL"),
    ("https://exa mple.com/", "not a URL"),
    ("", "not a URL"),
])
def test_a_bad_public_url_is_refused_naming_why(value: str, says: str) -> None:
    with pytest.raises(BadPublicUrl, match=says):
        check_public_url(value)


def test_serve_refuses_a_bad_public_url_before_staging(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "murmurd", "serve", str(tmp_path / "missing"),
                           "--public-url", "ftp://example.com/"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "--public-url" in proc.stderr and "http or https" in proc.stderr


def test_a_good_public_url_gains_its_trailing_slash() -> None:
    assert check_public_url(" http://murmurd:8080 ") == "http://murmurd:8080/"
    assert check_public_url("https://[::1]:8443/a2a/") == "https://[::1]:8443/a2a/"
