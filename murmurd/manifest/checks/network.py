"""Network grants: the top-level `network:` block, `capabilities.network` and the forms of a
`network.allow` entry; what counts as a loopback host."""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

from murmurd.manifest.checks.context import Context, hide_userinfo, is_number, section
from murmurd.manifest.diagnostics import Diagnostic, diagnostic
from murmurd.manifest.origins import BadOrigin, check_origin

_HOST_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"(?=.{{1,253}}$){_HOST_LABEL}(?:\.{_HOST_LABEL})*\.?")
_NETWORK_FORMS = "allowed forms are https://host[:port], host, or host:port"


def rule_network(ctx: Context) -> list[Diagnostic]:
    """The top-level `network:` block (upstream's place for the A2A port)."""
    network = ctx.section("network")
    if network is None:
        return []
    found = network_rules({"internal_port": network.get("internal_port")}, "network")
    top = network.get("internal_port")
    older = (section(ctx.raw, "capabilities", "network") or {}).get("internal_port")
    if isinstance(top, int) and isinstance(older, int) and top != older:
        rule = (f"disagrees with capabilities.network.internal_port ({older}); set the port once, "
                "at the top level as upstream does")
        found.append(diagnostic("E-CAP-009", "network.internal_port", rule, top))
    origins = network.get("cors_origins")
    if isinstance(origins, list):
        for i, origin in enumerate(origins):
            if isinstance(origin, str):
                try:
                    check_origin(origin)
                except BadOrigin as exc:
                    found.append(diagnostic("E-CAP-011", f"network.cors_origins[{i}]", str(exc), origin[:200]))
    return found



def network_rules(network: dict | None, prefix: str) -> list[Diagnostic]:
    if network is None:
        return []
    found: list[Diagnostic] = []
    allow = network.get("allow")
    if isinstance(allow, list):
        for i, entry in enumerate(allow):
            problem = network_entry_problem(entry) if isinstance(entry, str) else None
            if problem is not None:
                found.append(diagnostic("E-CAP-001", f"{prefix}.allow[{i}]", problem, hide_userinfo(entry)))
    port = network.get("internal_port")
    if is_number(port) and not (isinstance(port, int) and 1 <= port <= 65535):
        rule = "must be a TCP port from 1 to 65535 (leave it out for an OS-assigned port)"
        found.append(diagnostic("E-CAP-008", f"{prefix}.internal_port", rule, port))
    return found


def network_entry_problem(entry: str) -> str | None:
    """Why a `network.allow` entry is malformed, or None when it is one of the allowed forms."""
    if not entry or entry != entry.strip():
        return f"must be a non-empty host without surrounding spaces; {_NETWORK_FORMS}"
    if "?" in entry:
        return f"must not contain a query; {_NETWORK_FORMS}"
    if "#" in entry:
        return f"must not contain a fragment; {_NETWORK_FORMS}"
    if "://" in entry:
        return _url_entry_problem(entry)
    if "/" in entry:
        return f"must not contain a path; {_NETWORK_FORMS}"
    if "@" in entry:
        return f"must not contain credentials; {_NETWORK_FORMS}"
    host, port = _split_host_port(entry)
    return _host_port_problem(host, port)


def _url_entry_problem(entry: str) -> str | None:
    parts = urlsplit(entry)
    if parts.scheme.lower() not in ("http", "https"):
        return f"scheme {parts.scheme!r} is not allowed, only http and https; {_NETWORK_FORMS}"
    if "@" in parts.netloc:
        return f"must not contain credentials; {_NETWORK_FORMS}"
    if parts.path not in ("", "/"):
        return f"must not contain a path; {_NETWORK_FORMS}"
    host, port = _split_host_port(parts.netloc)
    return _host_port_problem(host, port)


def _split_host_port(entry: str) -> tuple[str, str | None]:
    if entry.startswith("["):
        match = re.fullmatch(r"\[([^\]]*)\](?::(.*))?", entry)
        return (match.group(1), match.group(2)) if match else (entry, None)
    if entry.count(":") > 1:
        return entry, None  # a bare IPv6 address
    host, sep, port = entry.partition(":")
    return host, (port if sep else None)


def _host_port_problem(host: str, port: str | None) -> str | None:
    if not _valid_host(host):
        return f"{host!r} is not a valid host name or IP address; {_NETWORK_FORMS}"
    if port is not None and not (port.isdigit() and 1 <= int(port) <= 65535):
        return f"port {port!r} is not a number from 1 to 65535; {_NETWORK_FORMS}"
    return None


def _valid_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return bool(_HOSTNAME.fullmatch(host))


def is_loopback_host(host: str) -> bool:
    """`localhost`, any address in 127.0.0.0/8, or `::1`."""
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


