"""The session's identity as upstream hands it to every guest and child process.

Upstream (`capsule-runtime/src/runtime.rs`) puts `MURMUR_CAPSULE_NAME`, `MURMUR_CAPSULE_VERSION`,
`MURMUR_SESSION_ID`, `MURMUR_CAPSULE_URL` and the inference settings into the WASI environment of
the driver and of every tool; shell children see them too. murmurd sets the identity and the two
inference names that are no secret (`MURMUR_INFERENCE_TRANSPORT`, `MURMUR_INFERENCE_DRIVER`) for
drivers, WASM tools, native tools and shell children. The endpoint, model and API key stay the
driver's alone. `MURMUR_CAPSULE_URL` (`localhost:<port>`, upstream's form) exists only under
`serve`, where a port is bound. These names are the runtime's: applied last, never shadowed by
`env.allow` or a caller's override, never stripped by `strip_env`.
"""

from __future__ import annotations

from murmurd.manifest.capsule import CapsuleManifest

IDENTITY_NAMES = (
    "MURMUR_CAPSULE_NAME", "MURMUR_CAPSULE_VERSION", "MURMUR_SESSION_ID", "MURMUR_CAPSULE_URL",
    "MURMUR_INFERENCE_TRANSPORT", "MURMUR_INFERENCE_DRIVER",
)


def capsule_url_for(port: int) -> str:
    """What `MURMUR_CAPSULE_URL` and MURMUR.md carry for the bound port (upstream: `localhost:<port>`)."""
    return f"localhost:{port}"


def identity_env(manifest: CapsuleManifest, session_id: str, capsule_url: str | None = None) -> dict[str, str]:
    """The runtime-owned variables of one session (pure)."""
    env = {
        "MURMUR_CAPSULE_NAME": manifest.name,
        "MURMUR_CAPSULE_VERSION": manifest.version,
        "MURMUR_SESSION_ID": session_id,
    }
    if capsule_url:
        env["MURMUR_CAPSULE_URL"] = capsule_url
    inference = manifest.inference
    if inference is not None:
        env["MURMUR_INFERENCE_TRANSPORT"] = inference.transport
        env["MURMUR_INFERENCE_DRIVER"] = inference.driver.artifact if inference.driver else ""
    return env
