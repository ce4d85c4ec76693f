"""The path habit, kept by a grep over the package.

`murmurd/workdir_fs.py` is the one module that opens files beneath a session workdir (never
following a symlink), and `murmurd/workdir.py` the one that turns names and ids into
workdir-relative paths (`storage_name` for ids from the wire, `component` for artifact and log
names). Any other file-system call in `murmurd/` must be on `ALLOWED` with the reason it is not
a workdir path; any other code spelling a workdir path (`workdir.out / ...`, `f"out/..."`)
fails here. wasmtime opens what it is handed by name (a preopen, the stdio files), following
symlinks: it is only ever handed `workdir_fs.fd_path(<descriptor>)`, the object the runtime
already opened and checked.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "murmurd"
OWNERS = {"workdir_fs.py", "workdir.py"}
# Guest code: compiled into components, it runs inside wasmtime, confined by its own grant.
GUEST_CODE = "bundled/"

FS_CALL = re.compile(
    r"(?<![\w.])open\("
    r"|(?<!workdir_fs)\.(?:write_text|read_text|read_bytes|write_bytes|mkdir|unlink|touch|rmdir|rename|symlink_to"
    r"|iterdir|glob|rglob)\("
    r"|\bos\.(?:open|replace|rename|unlink|remove|mkdir|makedirs|symlink|listdir|scandir|fdopen|walk)\("
    r"|\bshutil\.(?:copy(?!fileobj)\w*|move|rmtree)\("
    r"|FileHandler\(|\btempfile\.(?:mkstemp|mkdtemp|\w*Temporary\w*)\("
)
# A workdir path spelled outside the layout: a join on a workdir directory, or a literal layout path.
WORKDIR_PATH = re.compile(
    r"workdir\.(?:root|logs|out|tools|contexts|home)\s*/"
    r"|\bf?[\"'](?:out|logs|contexts|tools|checkpoints)/"
    r"|[\"'](?:task\.md|trace\.jsonl|MURMUR\.md)[\"']"
)

# A path handed to wasmtime, which opens it by name (and follows symlinks) itself.
WASMTIME_BY_NAME = re.compile(
    r"\.preopen_dir\(|\.(?:stdin|stdout|stderr)_file\s*=|\b(?:Component|Module)\.(?:from_file|deserialize_file)\("
)
CHECKED_DESCRIPTOR = re.compile(r"(?:preopen_dir\(|_file\s*=\s*)workdir_fs\.fd_path\(")

# "file: the matching line, stripped" -> why it is not a path beneath a workdir.
_CGROUP = "the cgroup filesystem (a per-command pids cgroup), never a workdir"
_HELPER = "the confinement helper, before exec: /proc, the cgroup, ancestors of the workdir root (never below it)"
_STORES = ("the artifact stores (project/global .murmur/artifacts, a served registry directory), the payload "
           "cache and a built .mur.zip: names checked as single components, never a workdir")
_SIZE_WALK = ("the workdir size walk: directories opened O_DIRECTORY|O_NOFOLLOW beneath their "
              "parent's descriptor, sizes read with lstat, no file opened")
_REGISTRY = "the directory `murmurd registry serve` keeps, named by the operator"
ALLOWED: dict[str, str] = {
    'authoring/build.py: with open(executable, "rb") as handle:': "a native tool's executable in the artifact source being built (its ELF or #! header), never a workdir",
    'commands/chat.py: path.parent.mkdir(parents=True, exist_ok=True)': "chat's readline history file under the user's state directory, never a workdir",
    'commands/init.py: directory.mkdir(parents=True, exist_ok=True)': '`murmurd init DIR`: the new capsule directory the user names, never a session workdir',
    'commands/init.py: (directory / MANIFEST_FILE).write_text(dump_yaml(manifest_for(name, driver)), encoding="utf-8")': "`murmurd init DIR`: the new capsule's manifest (an existing one is never overwritten)",
    'commands/init.py: (directory / "README.md").write_text(readme_for(name, args.directory, driver), encoding="utf-8")': "`murmurd init DIR`: the new capsule's README",
    'commands/init.py: (directory / ".gitignore").write_text(GITIGNORE, encoding="utf-8")': "`murmurd init DIR`: the new capsule's .gitignore",
    'containment/cli_profile.py: data = json.loads((package / "package.json").read_text(encoding="utf-8")[:_MAX_CONFIG_BYTES])': "a CLI agent's installed npm package (its dependencies), read to derive its profile, never a workdir",
    'containment/cli_profile.py: with open(path, "rb") as source:': "a CLI agent's own configuration under the operator's HOME, never a workdir",
    'containment/cli_profile.py: with open(path, encoding="utf-8", errors="replace") as source:': "a CLI agent's own configuration under the operator's HOME, never a workdir",
    'containment/closure.py: with open(path, "rb") as source:': 'host binaries and libraries (ELF headers, #! lines) for the Landlock closure, never a workdir',
    'containment/closure.py: with open(path, encoding="utf-8", errors="replace") as conf:': "/etc/ld.so.conf and its includes: the loader's search path",
    'containment/closure.py: for included in sorted(glob.glob(pattern)):': "/etc/ld.so.conf.d: the loader's search path",
    'containment/sealed.py: self.sources[path] = os.open(path, os.O_PATH | os.O_CLOEXEC)': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.makedirs(os.path.dirname(target), exist_ok=True)': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.makedirs(target, exist_ok=True)': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.close(os.open(target, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.symlink(links[tree], build.inside(tree))': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.makedirs(build.inside("/etc"), exist_ok=True)': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: with open(build.inside("/etc/" + name), "w") as sink:': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.makedirs(build.inside("/dev"), exist_ok=True)': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.symlink(target, build.inside("/dev/" + name))': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.mkdir(_OLD_ROOT)': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/sealed.py: os.rmdir("/" + _OLD_ROOT)': 'the confinement helper building the composed root of `sealed` (a fresh tmpfs in its own mount namespace), before exec',
    'containment/seccomp_filter.py: with tempfile.TemporaryFile() as sink:': 'an unnamed scratch file libseccomp exports the compiled BPF into, never a workdir',
    'registry/resolve.py: return target.is_file() and not target.is_symlink() and target.read_bytes() == payload': "the payload cache under the archive's sha256 (murmurd's cache), never a workdir",
    'staging/template.py: with open(path, "rb") as source:': "a skill's payload in its artifact source or store (staging's input), read once into the session template, never a workdir",
    'staging/session_hold.py: fd = os.open(directory, _DIR_FLAGS)': "a session directory's lock: the directory itself opened O_DIRECTORY|O_NOFOLLOW, no file beneath it",
    'workdir_gc.py: for directory, _dirs, files in os.walk(path, followlinks=False):': '`murmurd gc`: sizes of a whole session directory to remove, no link followed, nothing opened',
    'workdir_gc.py: shutil.rmtree(path)': '`murmurd gc`: a whole session directory (shutil.rmtree uses dir_fd and never follows a link)',
    'containment/cgroup.py: lines = Path("/proc/self/mountinfo").read_text().splitlines()': _CGROUP,
    'containment/cgroup.py: memberships = Path("/proc/self/cgroup").read_text().splitlines()': _CGROUP,
    'containment/cgroup.py: return "pids" in (directory / "cgroup.subtree_control").read_text().split()': _CGROUP,
    'containment/cgroup.py: entries = [e for e in os.scandir(root) if e.name.startswith(PREFIX) and e.is_dir(follow_symlinks=False)]': _CGROUP,
    "containment/cgroup.py: os.rmdir(entry.path)": _CGROUP,
    "containment/cgroup.py: path.mkdir()": _CGROUP,
    'containment/cgroup.py: (path / "pids.max").write_text(str(pids_max))': _CGROUP,
    'containment/cgroup.py: for line in (self.path / "pids.events").read_text().splitlines():': _CGROUP,
    'containment/cgroup.py: pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]': _CGROUP,
    "containment/cgroup.py: self.path.rmdir()": _CGROUP,
    'containment/resources.py: lines = Path("/proc/self/cgroup").read_text().splitlines()': _CGROUP,
    'containment/resources.py: enabled = (directory / "cgroup.subtree_control").read_text().split()': _CGROUP,
    "containment/resources.py: trial.mkdir()": _CGROUP,
    "containment/resources.py: trial.rmdir()": _CGROUP,
    'containment/resources.py: with open(path, "w") as sink:': _CGROUP + " (memory.max, cpu.max, io.max)",
    'containment/resources.py: return (node.resolve().parent / "dev").read_text().strip()':
        "sysfs: the block device under the workdir's mount, for io.max, never a workdir file",
    "containment/resources.py: directory.mkdir()": _CGROUP,
    "containment/resources.py: for line in (directory / name).read_text().splitlines():": _CGROUP,
    "session/workdir_guard.py: entries = list(os.scandir(fd))": _SIZE_WALK,
    "session/workdir_guard.py: pending = [os.open(root, _DIRECTORY_FLAGS)]": _SIZE_WALK,
    "session/workdir_guard.py: pending.append(os.open(entry.name, _DIRECTORY_FLAGS, dir_fd=fd))": _SIZE_WALK,
    'session/shell_watchdog.py: pids = [int(p) for p in open(procs, "rb").read().split()]': _CGROUP,
    'containment/child.py: with open(procs_file, "w") as sink:': _HELPER,
    'containment/child.py: with open(path, "w") as sink:': _HELPER + " (/proc/self/uid_map and friends)",
    'containment/child.py: last = int(open("/proc/sys/kernel/cap_last_cap").read())': _HELPER,
    "containment/landlock.py: fd = os.open(path, os.O_PATH | os.O_CLOEXEC)":
        "an O_PATH handle for a Landlock rule: the workdir root, an operator's HOME, ancestors' siblings, /dev/null",
    'session/rlimits.py: for entry in os.scandir("/proc"):': "/proc: the uid's task count for RLIMIT_NPROC",
    'session/rlimits.py: with open(f"/proc/{entry.name}/status", "rb") as status:': "/proc: the uid's task count for RLIMIT_NPROC",
    "commands/artifacts.py: data = Path(args.data_file).read_text(encoding=\"utf-8\")": "the operator's --data-file",
    "commands/common.py: return candidate.read_text(encoding=\"utf-8\")": "the operator's --task file",
    "manifest/reading.py: fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)":
        "a capsule's murmur.yaml, an artifact's murmur.yaml, murmur.lock or a prompt file",
    "manifest/reading.py: with os.fdopen(fd, \"rb\") as handle:":
        "a capsule's murmur.yaml, an artifact's murmur.yaml, murmur.lock or a prompt file",
    "a2a/core/state_dir.py: fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)":
        "the state directory's lock file",
    "a2a/core/state_dir.py: state_dir.mkdir(parents=True, exist_ok=True)": "the state directory",
    "authoring/build.py: digest.update(hashlib.sha256(path.read_bytes()).digest())": "artifact sources (build)",
    "authoring/build.py: for path in sorted(root.rglob(\"*\")):": "artifact sources (build)",
    "authoring/build.py: with tempfile.TemporaryDirectory(prefix=\"murmurd-build-\") as scratch:": "the build's scratch",
    "authoring/build.py: store.parent.mkdir(parents=True, exist_ok=True)": "the build cache",
    "staging/bundled.py: return sorted(p for p in root.iterdir() if (p / \"murmur.yaml\").is_file())":
        "the package's bundled artifact directories",
    "authoring/build.py: output.parent.mkdir(parents=True, exist_ok=True)": "a build's output (the artifact's or the cache's)",
    "authoring/build.py: copy.parent.mkdir(parents=True, exist_ok=True)": "the build's scratch copy of the sources",
    "authoring/build.py: shutil.copyfile(path, copy)": "the build's scratch copy of the sources",
    "authoring/build.py: shutil.copyfile(source, tmp)": "the build cache and the artifact's built .wasm",
    "authoring/build.py: os.replace(tmp, dest)": "the build cache and the artifact's built .wasm",
    "authoring/build.py: tmp.unlink(missing_ok=True)": "the build cache and the artifact's built .wasm",
    "session/tokens.py: contents = path.read_bytes()": "the bundled tokenizer",
    "a2a/http/auth/config.py: with open(path, \"rb\") as handle:":
        "the operator's credentials file and token files (--credentials, --token-file, token_file:)",
    "session/shell_output.py: return os.fdopen(workdir_fs.anonymous_file(dir_fd), \"w+b\")":
        "wraps a nameless spool workdir_fs opened beneath the logs directory's descriptor",
    "session/shell_model.py: directory.parent.mkdir(parents=True, exist_ok=True)  # an operator's own path, outside the workdir":
        "a ShellPolicy home/logs_dir an operator placed outside the workdir",
    "a2a/stores/sqlite.py: self.path.parent.mkdir(parents=True, exist_ok=True)": "the state directory (task store)",
    'session/file_process.py: with os.fdopen(os.dup(template), "wb") as sink:':
        "the session template pickled into a memfd the daemon just created for the file process, never a workdir",
    'session/file_process_main.py: with open(int(argv[1]), "rb") as source:':
        "the file process reads its template from the memfd its daemon handed over, never a workdir",
    "session/file_process_main.py: Path(index_dir).mkdir(parents=True, exist_ok=True)":
        "the context index directory in the daemon's state directory (as context_sessions.py makes it), never a workdir",
    "a2a/core/context_sessions.py: self.index_dir.mkdir(parents=True, exist_ok=True)":
        "the state directory (the context session index, murmurd's own; no guest reaches it)",
    "a2a/core/context_sessions.py: names = sorted(os.listdir(self.index_dir))":
        "the state directory (the context session index, murmurd's own; no guest reaches it)",
    "host/wasi.py: self.log_path.parent.mkdir(parents=True, exist_ok=True)  # outside any workdir: `murmurd call --log`":
        "the operator's `murmurd call --log` path",
    "host/host.py: wasm = path.read_bytes()": "a component file being compiled",
    "host/cache.py: blob = path.read_bytes()": "the compile cache",
    "host/cache.py: path.unlink(missing_ok=True)": "the compile cache",
    "host/cache.py: path.parent.mkdir(parents=True, exist_ok=True)": "the compile cache",
    "host/cache.py: tmp.write_bytes(_MAGIC + hashlib.sha256(payload).digest() + payload)": "the compile cache",
    "host/cache.py: os.replace(tmp, path)": "the compile cache",
    "staging/lock.py: tmp.write_text(dump_yaml(lock.model_dump()), encoding=\"utf-8\")":
        "the capsule's murmur.lock",
    "staging/lock.py: os.replace(tmp, path)": "the capsule's murmur.lock",
    'staging/bundled_native.py: own = [(p.name, p) for p in sorted(directory.glob("*.py"))]': "packing a bundled native tool from murmurd's own package into the cache (never a workdir)",
    'staging/bundled_native.py: kit = [(f"nativekit/{p.name}", p) for p in sorted(NATIVE_KIT.glob("*.py"))]': "packing a bundled native tool from murmurd's own package into the cache (never a workdir)",
    'staging/bundled_native.py: digest.update(name.encode() + b"\\0" + path.read_bytes() + b"\\0")': "packing a bundled native tool from murmurd's own package into the cache (never a workdir)",
    "staging/bundled_native.py: target.parent.mkdir(parents=True, exist_ok=True)": "packing a bundled native tool from murmurd's own package into the cache (never a workdir)",
    'staging/bundled_native.py: with tempfile.TemporaryDirectory(prefix=".lay-", dir=target.parent) as scratch:': "packing a bundled native tool from murmurd's own package into the cache (never a workdir)",
    'staging/bundled_native.py: (source / "nativekit").mkdir(parents=True)': "packing a bundled native tool from murmurd's own package into the cache (never a workdir)",
    "staging/bundled_native.py: shutil.copyfile(path, source / archived)": "packing a bundled native tool from murmurd's own package into the cache (never a workdir)",
    "staging/bundled_native.py: os.replace(packed, target)": "packing a bundled native tool from murmurd's own package into the cache (never a workdir)",
    'staging/bundled_native.py: with open(executable, "rb") as handle:': "reading a native tool's shebang in the cache or the package (never a workdir)",
    "staging/artifacts.py: with open(path, \"rb\") as handle:": "hashing an artifact's source payload",
    "staging/artifacts.py: for child in sorted(directory.iterdir()):": "finding a skill in its source directory",
    "staging/resolve.py: wasm = sorted(path.glob(\"*.wasm\"))": "an artifact's source directory",
    "staging/registry.py: return json.loads(path.read_text(encoding=\"utf-8\"))": "the file registry",
    "staging/registry.py: folder.mkdir(parents=True, exist_ok=True)": "the file registry",
    "staging/registry.py: shutil.copyfile(artifact_dir / \"murmur.yaml\", folder / \"murmur.yaml\")": "the file registry",
    "staging/registry.py: shutil.copyfile(source, folder / payload_name)": "the file registry",
    "staging/registry.py: tmp.write_text(json.dumps(index, indent=2, sort_keys=True), encoding=\"utf-8\")":
        "the file registry",
    "staging/registry.py: os.replace(tmp, self.root / INDEX)": "the file registry",
    "registry/commands.py: directory.mkdir(parents=True, exist_ok=True)": _REGISTRY,
    "registry/install.py: return path.read_bytes()": "the operator's .mur.zip (`install FILE`, `publish FILE`)",
    "registry/stores.py: target.parent.mkdir(parents=True, exist_ok=True)": _STORES,
    "registry/stores.py: tmp.write_bytes(data)": _STORES,
    "registry/stores.py: os.replace(tmp, target)": _STORES,
    "registry/stores.py: return sha256_hex(self.archive.read_bytes())": _STORES,
    "registry/stores.py: data = self.archive.read_bytes()": _STORES,
    "registry/stores.py: found = [v.name for v in folder.iterdir() if NAME.fullmatch(v.name) and self._present(name, v.name, None)]":
        _STORES,
    'registry/stores.py: digest = sidecar.read_text(encoding="ascii", errors="replace").strip().lower()': _STORES,
    'registry/stores.py: data = json.loads(path.read_text(encoding="utf-8"))["meta"]': _STORES,
    "registry/stores.py: for folder in sorted(self.root.iterdir()):": _STORES,
    "traceview/sessions.py: with os.scandir(directory) as entries:":
        "listing the ses_* names of the operator's `--workdir` (entries are lstat'ed, symlinks skipped)",
}


def _hits(pattern: re.Pattern[str]) -> list[str]:
    found = []
    for file in sorted(PACKAGE.rglob("*.py")):
        rel = file.relative_to(PACKAGE).as_posix()
        if rel in OWNERS or rel.startswith(GUEST_CODE):
            continue
        for line in file.read_text(encoding="utf-8").splitlines():
            code = line.split(" #")[0] if pattern is WORKDIR_PATH else line
            stripped = line.strip()
            if stripped.startswith(("def ", "async def ", "#", '"""')) or not pattern.search(code):
                continue
            found.append(f"{rel}: {stripped}")
    return found


def test_only_workdir_fs_opens_files_and_the_rest_is_allowlisted_with_a_reason() -> None:
    hits = _hits(FS_CALL)
    unexpected = [hit for hit in hits if hit not in ALLOWED]
    assert unexpected == [], "open workdir files through murmurd.workdir_fs (or allowlist a non-workdir path):\n" + "\n".join(unexpected)
    stale = sorted(set(ALLOWED) - set(hits))
    assert stale == [], "allowlist entries that no longer match anything:\n" + "\n".join(stale)


def test_only_the_layout_spells_workdir_paths() -> None:
    hits = _hits(WORKDIR_PATH)
    assert hits == [], "build workdir paths through murmurd.workdir:\n" + "\n".join(hits)


def test_wasmtime_opens_by_name_only_what_the_runtime_already_opened() -> None:
    hits = _hits(WASMTIME_BY_NAME)
    assert len(hits) == 3, hits  # the preopen, stdout, stderr (host/wasi.py)
    by_name = [hit for hit in hits if not CHECKED_DESCRIPTOR.search(hit)]
    assert by_name == [], "hand wasmtime workdir_fs.fd_path(<descriptor>), not a name:\n" + "\n".join(by_name)


def test_the_grep_sees_what_it_forbids() -> None:
    """The patterns are live: each forbidden spelling below is caught."""
    for line in ('open(path, "a")', "self.staged.workdir.result.write_text(text)", "os.open(name, flags)",
                 "logging.FileHandler(log_path)", "shutil.copyfile(a, b)", "tempfile.mkstemp(dir=d)"):
        assert FS_CALL.search(line), line
    for line in ("workdir_fs.write_text(root, RESULT, text)", "await session.open()", 'text.replace("a", "b")'):
        assert not FS_CALL.search(line), line
    for line in ('self.staged.workdir.contexts / context_id / "history.json"', 'out = f"out/result_{record.id}.txt"',
                 'root / "task.md"'):
        assert WORKDIR_PATH.search(line), line
    for line in ("config.preopen_dir(str(preopen), \".\")", "config.stderr_file = str(path)",
                 "config.stdout_file=name", "Component.from_file(engine, path)"):
        assert WASMTIME_BY_NAME.search(line) and not CHECKED_DESCRIPTOR.search(line), line
    for line in ("config.preopen_dir(workdir_fs.fd_path(fd), \".\")", "config.stderr_file = workdir_fs.fd_path(fd)"):
        assert WASMTIME_BY_NAME.search(line) and CHECKED_DESCRIPTOR.search(line), line
