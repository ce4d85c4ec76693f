"""The agent card served at `/.well-known/agent-card.json` (and `/.well-known/agent.json`).

One JSON document readable by three kinds of client:

- murmur peers read the upstream fields (runtime-notes §6): `name`, `version`, `url`, and
  `capabilities` `{"tools", "shell", "network", "streaming": true}`;
- a2a-sdk >= 1.0 reads `supportedInterfaces` (it ignores `url`/`preferredTransport` once that
  list is present, and ignores unknown members such as `capabilities.tools`). Both interfaces
  point at the JSON-RPC endpoint `url`; the client prefers the `1.0` one and speaks
  `SendMessage`...; a client pinned to `0.3` uses the same endpoint with `message/send`...;
- A2A 0.3 clients (a2a-sdk 0.3.x, other 0.3 SDKs) read `url`, `preferredTransport`,
  `protocolVersion` and `additionalInterfaces`.

When the daemon requires a credential, the card says how to present one in both shapes: each
`securitySchemes` entry carries the 0.3 members (`type`, `scheme`) and the 1.0 oneof member
(`httpAuthSecurityScheme`, `mtlsSecurityScheme`) side by side (each reader ignores the other's),
and the requirement is listed as 0.3 `security` and 1.0 `securityRequirements`; any one scheme
suffices.

Skills are the model-visible tools (an A2A card lists at least one skill, so a capsule without
tools gets one skill describing the capsule itself).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

from pydantic import Field

from murmurd.a2a.wire.common import WireModel

JSONRPC: Final = "JSONRPC"
PROTOCOL_VERSION_1_0 = "1.0"
PROTOCOL_VERSION_0_3 = "0.3"
PROTOCOL_VERSION_0_3_FULL = "0.3.0"
TEXT_MODES = ("text/plain",)


class AgentInterface(WireModel):
    """1.0 `supportedInterfaces` entry."""

    url: str
    protocol_binding: Literal["JSONRPC"] = JSONRPC
    protocol_version: str


class LegacyInterface(WireModel):
    """0.3 `additionalInterfaces` entry."""

    url: str
    transport: Literal["JSONRPC"] = JSONRPC


class Capabilities(WireModel):
    streaming: bool = True
    push_notifications: bool = False
    tools: list[str]
    shell: bool
    network: bool


class Skill(WireModel):
    id: str
    name: str
    description: str
    tags: list[str] = Field(min_length=1)
    input_modes: list[str] | None = None
    output_modes: list[str] | None = None


class HttpAuthScheme(WireModel):
    """1.0 `httpAuthSecurityScheme`."""

    scheme: str
    description: str | None = None


class MtlsScheme(WireModel):
    """1.0 `mtlsSecurityScheme`."""

    description: str | None = None


class SecurityScheme(WireModel):
    """One scheme in the 0.3 shape (`type`, `scheme`) and the 1.0 shape (the oneof member) at once."""

    type: Literal["http", "mutualTLS"]
    scheme: str | None = None
    description: str
    http_auth_security_scheme: HttpAuthScheme | None = None
    mtls_security_scheme: MtlsScheme | None = None


class SchemeScopes(WireModel):
    scopes: list[str] = Field(default_factory=list, alias="list")


class SecurityRequirement(WireModel):
    """1.0 `securityRequirements` entry: scheme name -> scopes."""

    schemes: dict[str, SchemeScopes]


BEARER_SCHEME = SecurityScheme(
    type="http", scheme="bearer", description="A bearer token from the operator of this capsule.",
    http_auth_security_scheme=HttpAuthScheme(scheme="Bearer", description="A bearer token from the operator of this capsule."))
MTLS_SCHEME = SecurityScheme(
    type="mutualTLS", description="A client certificate signed by the CA this capsule trusts.",
    mtls_security_scheme=MtlsScheme(description="A client certificate signed by the CA this capsule trusts."))


class AgentCard(WireModel):
    name: str
    description: str
    version: str
    url: str
    protocol_version: str = PROTOCOL_VERSION_0_3_FULL
    preferred_transport: Literal["JSONRPC"] = JSONRPC
    additional_interfaces: list[LegacyInterface]
    supported_interfaces: list[AgentInterface] = Field(min_length=1)
    capabilities: Capabilities
    default_input_modes: list[str]
    default_output_modes: list[str]
    skills: list[Skill] = Field(min_length=1)
    security_schemes: dict[str, SecurityScheme] | None = None
    security: list[dict[str, list[str]]] | None = None  # A2A 0.3
    security_requirements: list[SecurityRequirement] | None = None  # A2A 1.0


def _skills(name: str, description: str, tools: Sequence[str],
            tool_descriptions: Mapping[str, str] | None) -> list[Skill]:
    descriptions = tool_descriptions or {}
    skills = [Skill(id=tool, name=tool, description=descriptions.get(tool) or f"The {tool} tool of capsule {name}.",
                    tags=["tool"]) for tool in dict.fromkeys(tools)]
    if not skills:
        skills = [Skill(id=name, name=name, description=description or f"The {name} capsule.", tags=["capsule"])]
    return skills


def agent_card(name: str, version: str, description: str, url: str, tools: Sequence[str], shell: bool,
               network: bool, *, tool_descriptions: Mapping[str, str] | None = None,
               bearer: bool = False, mtls: bool = False) -> dict[str, Any]:
    """The card for a capsule whose JSON-RPC endpoint (`POST /`) is at `url`
    (e.g. `http://127.0.0.1:8080/`); `bearer`/`mtls`: the credentials it accepts, if it requires one."""
    schemes = {name: scheme for name, scheme, on in (("bearer", BEARER_SCHEME, bearer), ("mtls", MTLS_SCHEME, mtls)) if on}
    card = AgentCard(
        name=name, description=description or f"The {name} capsule.", version=version, url=url,
        additional_interfaces=[LegacyInterface(url=url)],
        supported_interfaces=[AgentInterface(url=url, protocol_version=PROTOCOL_VERSION_1_0),
                              AgentInterface(url=url, protocol_version=PROTOCOL_VERSION_0_3)],
        capabilities=Capabilities(tools=list(dict.fromkeys(tools)), shell=shell, network=network),
        default_input_modes=list(TEXT_MODES), default_output_modes=list(TEXT_MODES),
        skills=_skills(name, description, tools, tool_descriptions),
        security_schemes=schemes or None,
        security=[{name: []} for name in schemes] or None,
        security_requirements=[SecurityRequirement(schemes={name: SchemeScopes()}) for name in schemes] or None,
    )
    return card.dump()
