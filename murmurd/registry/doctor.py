"""`murmurd doctor`: upstream's checklist — every declared artifact found in the project or global
store (or, murmurd's addition, bundled with murmurd) and consistent with `murmur.lock`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from murmurd import __version__
from murmurd.manifest.reading import UnreadableFile, YamlRefused, load_yaml, read_text_file
from murmurd.registry.errors import NotFound, RegistryError
from murmurd.registry.lock import pinned_sha, read_lock
from murmurd.registry.stores import ARTIFACTS, Store, global_root, host_platform, project_root_or_error
from murmurd.registry.versions import best, is_exact, satisfies
from murmurd.staging.bundled import find_bundled


@dataclass
class Report:
    lines: list[str] = field(default_factory=list)
    fixes: list[str] = field(default_factory=list)
    passed: int = 0

    @property
    def ok(self) -> bool:
        return not self.fixes

    def text(self) -> str:
        out = [*self.lines, ""]
        if self.ok:
            out.append("All checks passed.")
        else:
            failed = len(self.fixes)
            out += [f"{self.passed} check{'' if self.passed == 1 else 's'} passed, "
                    f"{failed} error{'' if failed == 1 else 's'} found.", ""]
            out += [f"Fix: {fix}" for fix in self.fixes]
        return "\n".join(out)


def _declared(project: Path) -> list[dict]:
    try:
        raw = load_yaml(read_text_file(project / "murmur.yaml"))
    except (UnreadableFile, OSError, ValueError, YamlRefused) as exc:
        raise RegistryError("E-IO-003", f"cannot read {project / 'murmur.yaml'}: {exc}") from None
    artifacts = raw.get("artifacts") if isinstance(raw, dict) else None
    return [a for a in artifacts or [] if isinstance(a, dict) and isinstance(a.get("name"), str)]


def _is_local(entry: dict) -> bool:
    return entry.get("local_source") is True or (isinstance(entry.get("source"), str)
                                                 and entry.get("local_source") is not False)


def run_doctor(cwd: Path) -> Report:
    project = project_root_or_error(cwd)
    lock = read_lock(project)
    stores = [Store(project / ARTIFACTS, "project"), Store(global_root(), "global")]
    platform = host_platform()
    entries = _declared(project)
    report = Report([f"Checking {project / 'murmur.yaml'} for {platform}..."])
    width = max([len(f"{e['name']}@{e.get('version') or ''}") for e in entries] or [0])
    for entry in entries:
        name, version = entry["name"], str(entry.get("version") or "")
        ref = f"{name}@{version}"
        if _is_local(entry):
            report.lines.append(f"  ✓  {ref:<{width}}   local source")
            report.passed += 1
            continue
        stored = None
        pin = lock.pin(name) if lock is not None else None
        for store in stores:
            if is_exact(version):
                chosen: str | None = version
            elif pin is not None and satisfies(version or None, pin.resolved_version):
                chosen = pin.resolved_version  # a requirement stages what the lock pinned
            else:
                chosen = best(version or None, store.versions(name))
            if chosen:
                try:
                    stored = store.lookup(name, chosen, platform)
                    break
                except NotFound:
                    continue
        if stored is None:
            bundled = find_bundled(name)
            if bundled is not None and satisfies(version or None, bundled.manifest.version):
                report.lines.append(f"  ✓  {ref:<{width}}   bundled with murmurd {__version__} "
                                    f"({bundled.manifest.version})")
                report.passed += 1
                continue
            report.lines.append(f"  ✗  {ref:<{width}}   {platform}   — missing")
            report.fixes.append(f"murmurd install {ref}")
            continue
        if lock is not None and pin is None:
            report.lines.append(f"  ✗  {ref:<{width}}   {platform}   — murmur.lock missing artifact entry for '{name}'")
            report.fixes.append(f"murmurd install {ref}")
        elif pin is not None and not satisfies(version or None, pin.resolved_version):
            report.lines.append(f"  ✗  {ref:<{width}}   {platform}   — murmur.lock version mismatch for '{name}': "
                                f"manifest requested {version}, lock pinned {pin.resolved_version}")
            report.fixes.append(f"{name}: remove the stale murmur.lock entry, then run murmurd install {ref}")
        elif pin is not None and (actual := stored.hash_on_disk()) != pinned_sha(pin):
            report.lines += [f"  ✗  {ref:<{width}}   {platform}   — artifact integrity check failed for {ref}",
                             f"        expected sha256 (murmur.lock): {pinned_sha(pin)}",
                             f"        actual sha256 (on disk):       {actual}"]
            report.fixes.append(f"{name}: artifact on disk does not match murmur.lock — re-publish or delete the lock")
        else:
            report.lines.append(f"  ✓  {ref:<{width}}   {platform}")
            report.passed += 1
    return report
