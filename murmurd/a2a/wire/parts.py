"""Message/artifact parts across dialects.

Parts are stored verbatim (whatever dialect sent them); rendering converts each one through a
neutral `Part` into the answering dialect's shape:

| neutral | UPSTREAM            | V02 (A2A 0.1)             | V03 (A2A 0.3)             | V10 (A2A 1.0)        |
|---------|---------------------|---------------------------|---------------------------|----------------------|
| text    | `{"text"}`          | `{"type":"text","text"}`  | `{"kind":"text","text"}`  | `{"text"}`           |
| file    | stored dict as is   | `{"type":"file","file"}`  | `{"kind":"file","file"}`  | `{"raw"}` / `{"url"}`|
| data    | stored dict as is   | `{"type":"data","data"}`  | `{"kind":"data","data"}`  | `{"data"}`           |

A file is `{"bytes": <base64>}` or `{"uri"}` plus optional `name`/`mimeType` in 0.1/0.3, and
`raw`/`url` plus `filename`/`mediaType` in 1.0. A part no dialect recognises is carried as a data
part holding the whole stored dict, so nothing is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

PartKind = Literal["text", "file", "data"]


@dataclass(frozen=True)
class Part:
    kind: PartKind
    text: str | None = None
    data: Any = None
    file_bytes: str | None = None  # base64
    file_uri: str | None = None
    name: str | None = None
    mime_type: str | None = None
    metadata: dict[str, Any] | None = None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def neutral(part: dict[str, Any]) -> Part:
    """Any dialect's part dict as a neutral `Part`."""
    tag = _str(part.get("kind")) or _str(part.get("type"))
    metadata = part.get("metadata") if isinstance(part.get("metadata"), dict) else None
    if tag == "text" or (tag is None and isinstance(part.get("text"), str)):
        return Part("text", text=_str(part.get("text")) or "", metadata=metadata)
    file = part.get("file")
    if (tag == "file" or tag is None) and isinstance(file, dict):
        return Part("file", file_bytes=_str(file.get("bytes")), file_uri=_str(file.get("uri")),
                    name=_str(file.get("name")), mime_type=_str(file.get("mimeType") or file.get("mime_type")),
                    metadata=metadata)
    if tag is None and (isinstance(part.get("raw"), str) or isinstance(part.get("url"), str)):
        return Part("file", file_bytes=_str(part.get("raw")), file_uri=_str(part.get("url")),
                    name=_str(part.get("filename")), mime_type=_str(part.get("mediaType") or part.get("media_type")),
                    metadata=metadata)
    if (tag == "data" or tag is None) and "data" in part:
        data = part["data"]
        if metadata and metadata.get("data_part_compat") and isinstance(data, dict) and set(data) == {"value"}:
            # a 1.0 non-object data value carried through 0.3 the way a2a-sdk does it
            data = data["value"]
            metadata = {k: v for k, v in metadata.items() if k != "data_part_compat"} or None
        return Part("data", data=data, metadata=metadata)
    return Part("data", data=dict(part))


def _with_metadata(out: dict[str, Any], part: Part) -> dict[str, Any]:
    if part.metadata:
        out["metadata"] = dict(part.metadata)
    return out


def _file_03(part: Part) -> dict[str, Any]:
    file: dict[str, Any] = {}
    if part.file_bytes is not None:
        file["bytes"] = part.file_bytes
    else:
        file["uri"] = part.file_uri or ""
    if part.name:
        file["name"] = part.name
    if part.mime_type:
        file["mimeType"] = part.mime_type
    return file


def _object_data(part: Part) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """0.1/0.3 data parts hold objects only; other values travel as `{"value": v}`."""
    if isinstance(part.data, dict):
        return part.data, part.metadata
    return {"value": part.data}, {**(part.metadata or {}), "data_part_compat": True}


def to_v03(part: dict[str, Any]) -> dict[str, Any]:
    p = neutral(part)
    if p.kind == "text":
        return _with_metadata({"kind": "text", "text": p.text or ""}, p)
    if p.kind == "file":
        return _with_metadata({"kind": "file", "file": _file_03(p)}, p)
    data, metadata = _object_data(p)
    out: dict[str, Any] = {"kind": "data", "data": data}
    if metadata:
        out["metadata"] = metadata
    return out


def to_v02(part: dict[str, Any]) -> dict[str, Any]:
    p = neutral(part)
    if p.kind == "text":
        return _with_metadata({"type": "text", "text": p.text or ""}, p)
    if p.kind == "file":
        return _with_metadata({"type": "file", "file": _file_03(p)}, p)
    data, metadata = _object_data(p)
    out: dict[str, Any] = {"type": "data", "data": data}
    if metadata:
        out["metadata"] = metadata
    return out


def to_v10(part: dict[str, Any]) -> dict[str, Any]:
    p = neutral(part)
    out: dict[str, Any]
    if p.kind == "text":
        out = {"text": p.text or ""}
    elif p.kind == "file":
        out = {"raw": p.file_bytes} if p.file_bytes is not None else {"url": p.file_uri or ""}
        if p.name:
            out["filename"] = p.name
        if p.mime_type:
            out["mediaType"] = p.mime_type
    else:
        out = {"data": p.data}
    return _with_metadata(out, p)


def to_upstream(part: dict[str, Any]) -> dict[str, Any]:
    """Text parts in murmur's `{"text"}` form; anything else exactly as it was stored."""
    p = neutral(part)
    if p.kind == "text":
        return _with_metadata({"text": p.text or ""}, p)
    return dict(part)


def text_part(text: str) -> dict[str, Any]:
    """A neutral (upstream/1.0-shaped) text part, converted per dialect on render."""
    return {"text": text}
