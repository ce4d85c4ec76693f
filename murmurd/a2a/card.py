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


def _skills(name: str, description: str, tools: Sequence[str],
            tool_descriptions: Mapping[str, str] | None) -> list[Skill]:
    descriptions = tool_descriptions or {}
    skills = [Skill(id=tool, name=tool, description=descriptions.get(tool) or f"The {tool} tool of capsule {name}.",
                    tags=["tool"]) for tool in dict.fromkeys(tools)]
    if not skills:
        skills = [Skill(id=name, name=name, description=description or f"The {name} capsule.", tags=["capsule"])]
    return skills


def agent_card(name: str, version: str, description: str, url: str, tools: Sequence[str], shell: bool,
               network: bool, *, tool_descriptions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The card for a capsule whose JSON-RPC endpoint (`POST /`) is at `url`
    (e.g. `http://127.0.0.1:8080/`)."""
    card = AgentCard(
        name=name, description=description or f"The {name} capsule.", version=version, url=url,
        additional_interfaces=[LegacyInterface(url=url)],
        supported_interfaces=[AgentInterface(url=url, protocol_version=PROTOCOL_VERSION_1_0),
                              AgentInterface(url=url, protocol_version=PROTOCOL_VERSION_0_3)],
        capabilities=Capabilities(tools=list(dict.fromkeys(tools)), shell=shell, network=network),
        default_input_modes=list(TEXT_MODES), default_output_modes=list(TEXT_MODES),
        skills=_skills(name, description, tools, tool_descriptions),
    )
    return card.dump()
