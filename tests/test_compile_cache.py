"""The compile cache: a second process does not compile; a damaged entry is rebuilt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hostile import tool_component
from murmurd.host import ComponentHost

_LOAD_AND_REPORT = """
import json, sys
from pathlib import Path
from murmurd.host import ComponentHost
host = ComponentHost(cache_dir=Path(sys.argv[1]))
host.load(Path(sys.argv[2]))
print(json.dumps(vars(host.cache.stats)))
host.close()
"""


def _load_in_new_process(cache: Path, wasm: Path) -> dict[str, int]:
    proc = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_REPORT, str(cache), str(wasm)],
        capture_output=True, text=True, check=True, timeout=120,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_second_process_reuses_the_compiled_component(tmp_path: Path) -> None:
    wasm = tmp_path / "spin.wasm"
    wasm.write_bytes(tool_component())
    cache = tmp_path / "cache"
    first = _load_in_new_process(cache, wasm)
    second = _load_in_new_process(cache, wasm)
    assert first["compiles"] == 1 and first["disk_hits"] == 0
    assert second["compiles"] == 0 and second["disk_hits"] == 1


def _entry(cache: Path) -> Path:
    (entry,) = (cache / "compiled").glob("*.cwasm")
    return entry


def test_a_corrupt_entry_is_discarded_and_rebuilt(tmp_path: Path) -> None:
    wasm = tool_component()
    cache = tmp_path / "cache"
    first = ComponentHost(cache_dir=cache)
    first.load_bytes(wasm, name="spin")
    first.close()
    entry = _entry(cache)
    blob = bytearray(entry.read_bytes())
    blob[-100] ^= 0xFF  # one flipped byte in the compiled payload
    entry.write_bytes(bytes(blob))

    second = ComponentHost(cache_dir=cache)
    second.load_bytes(wasm, name="spin")
    second.close()
    assert (second.cache.stats.discarded, second.cache.stats.compiles, second.cache.stats.disk_hits) == (1, 1, 0)
    assert _entry(cache).read_bytes() != bytes(blob)


def test_a_truncated_entry_is_discarded_and_rebuilt(tmp_path: Path) -> None:
    wasm = tool_component()
    cache = tmp_path / "cache"
    ComponentHost(cache_dir=cache).load_bytes(wasm, name="spin")
    entry = _entry(cache)
    entry.write_bytes(entry.read_bytes()[:50])
    again = ComponentHost(cache_dir=cache)
    again.load_bytes(wasm, name="spin")
    assert again.cache.stats.discarded == 1 and again.cache.stats.compiles == 1


def test_the_same_bytes_compile_once_per_process(tmp_path: Path) -> None:
    host = ComponentHost(cache_dir=tmp_path)
    wasm = tool_component()
    host.load_bytes(wasm, name="a")
    host.load_bytes(wasm, name="b")
    assert host.cache.stats.compiles == 1 and host.cache.stats.memory_hits == 1


def test_an_entry_wasmtime_refuses_is_discarded_even_with_a_good_digest(tmp_path: Path) -> None:
    import hashlib

    from murmurd.host.cache import _MAGIC

    wasm = tool_component()
    cache = tmp_path / "cache"
    ComponentHost(cache_dir=cache).load_bytes(wasm, name="spin")
    entry = _entry(cache)
    stale = b"serialized by some other wasmtime"  # consistent with its digest, unusable all the same
    entry.write_bytes(_MAGIC + hashlib.sha256(stale).digest() + stale)
    again = ComponentHost(cache_dir=cache)
    again.load_bytes(wasm, name="spin")
    assert (again.cache.stats.discarded, again.cache.stats.compiles) == (1, 1)
    assert _entry(cache).read_bytes() != _MAGIC + hashlib.sha256(stale).digest() + stale
