"""deploy/kubernetes: the kustomization rendered, every document checked against the Kubernetes
schemas (kubernetes-validate bundles them: offline), and the invariants the daemon relies on:
probes on paths the app serves, a termination grace that covers the daemon's shutdown, non-root
with a read-only root filesystem, every mount backed by a volume, every Secret key referenced
present in the example Secrets, and container arguments `murmurd serve` accepts. The Dockerfile
is checked against the same facts."""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import httpx
import kubernetes_validate
import pytest
import yaml

from murmurd.a2a.core.daemon import CANCEL_WAIT_SECS
from murmurd.a2a.http import health
from murmurd.a2a.http.health import HEALTH_PATH, READY_PATH
from murmurd.cli import build_parser
from murmurd.hooks.queue import DRAIN_BUDGET_SECONDS
from murmurd.manifest.validate import load_capsule
from murmurd.paths import cache_dir

ROOT = Path(__file__).resolve().parent.parent
KUSTOMIZE_DIR = ROOT / "deploy" / "kubernetes"
# The oldest Kubernetes the manifests support (autoscaling/v2, policy/v1, emptyDir sizeLimit)
# and the newest whose schemas kubernetes-validate bundles.
KUBERNETES_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
WRITABLE_PATHS = {"/var/lib/murmurd/capsule", "/var/lib/murmurd/state", "/var/cache/murmurd", "/tmp"}
SHUTDOWN_MARGIN_MAX = 15  # seconds the grace may exceed what the daemon needs


# -- rendering ------------------------------------------------------------------------------


def render(directory: Path) -> list[dict[str, Any]]:
    """The kustomization as `kubectl kustomize` builds it, for the parts this one uses: the
    listed resources, a ConfigMap per configMapGenerator (no hash suffix), image overrides."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    assert set(kustomization) <= {"apiVersion", "kind", "resources", "configMapGenerator", "images"}, (
        "render() handles only these kustomization fields; teach it the new one")
    documents: list[dict[str, Any]] = []
    for generator in kustomization.get("configMapGenerator", []):
        data = {Path(f).name: (directory / f).read_text() for f in generator["files"]}
        documents.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": generator["name"]}, "data": data})
    for resource in kustomization["resources"]:
        documents += [d for d in yaml.safe_load_all((directory / resource).read_text()) if d]
    images = {i["name"]: f"{i.get('newName', i['name'])}:{i['newTag']}" for i in kustomization.get("images", [])}
    for doc in documents:
        for container in _containers(doc):
            container["image"] = images.get(container["image"], container["image"])
    return documents


def _containers(doc: dict[str, Any]) -> list[dict[str, Any]]:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("initContainers", []) + spec.get("containers", [])


def _one(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in documents if d["kind"] == kind]
    return doc


@pytest.fixture(scope="module")
def documents() -> list[dict[str, Any]]:
    return render(KUSTOMIZE_DIR)


@pytest.fixture(scope="module")
def pod(documents) -> dict[str, Any]:
    return _one(documents, "Deployment")["spec"]["template"]["spec"]


@pytest.fixture(scope="module")
def daemon_container(pod) -> dict[str, Any]:
    (container,) = [c for c in pod["containers"] if c["name"] == "murmurd"]
    return container


def _serve_args(container: dict[str, Any]):
    """The container's arguments parsed by murmurd's own CLI."""
    args = list(container.get("command", [])[1:]) + list(container["args"])
    return build_parser().parse_args(args)


# -- schemas ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_document_passes_the_kubernetes_schema(documents, version: str) -> None:
    kinds = sorted(d["kind"] for d in documents)
    assert kinds == ["ConfigMap", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                     "Secret", "Secret", "Secret", "Service"]
    for doc in documents:
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_refuses_what_the_schema_forbids(documents) -> None:
    deployment = copy.deepcopy(_one(documents, "Deployment"))
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = "/readyz"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)
    service = copy.deepcopy(_one(documents, "Service"))
    service["spec"]["ports"][0]["port"] = "eighty"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, KUBERNETES_VERSIONS[0], strict=True)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on this machine")
def test_kubectl_kustomize_renders_the_same_documents(documents) -> None:
    built = subprocess.run(["kubectl", "kustomize", str(KUSTOMIZE_DIR)], capture_output=True, text=True,
                           timeout=60, check=True).stdout
    theirs = [d for d in yaml.safe_load_all(built) if d]
    hashed = _one(theirs, "ConfigMap")["metadata"]["name"]
    assert re.fullmatch(r"murmurd-capsule-[a-z0-9]{10}", hashed)  # a new capsule rolls the pods

    def canonical(docs: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(d, sort_keys=True).replace(hashed, "murmurd-capsule") for d in docs)

    assert canonical(theirs) == canonical(documents)


# -- the daemon's invariants ----------------------------------------------------------------


def test_probes_ask_paths_the_app_serves(pod, daemon_container) -> None:
    routes = health.routes(daemon=None)  # type: ignore[arg-type]  # routes only; nothing called
    served = {route.path for route in routes.routes}
    probes = {kind: daemon_container[kind]["httpGet"] for kind in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == probes["startupProbe"]["path"] == HEALTH_PATH
    assert probes["readinessProbe"]["path"] == READY_PATH
    assert {p["path"] for p in probes.values()} <= served
    ports = {p["name"]: p["containerPort"] for p in daemon_container["ports"]}
    args = _serve_args(daemon_container)
    assert all(ports[p["port"]] == args.port for p in probes.values())
    assert args.host == "0.0.0.0"
    # a readiness check waits at most STORE_PING_TIMEOUT_SECS for the store: the probe waits longer
    from murmurd.a2a.http.health import STORE_PING_TIMEOUT_SECS
    assert daemon_container["readinessProbe"]["timeoutSeconds"] > STORE_PING_TIMEOUT_SECS


def test_the_termination_grace_covers_the_daemons_shutdown(pod, daemon_container) -> None:
    args = _serve_args(daemon_container)
    # no lifecycle flags: serve runs a capsule that sets none as queue + sleep (docs/decisions.md, issue 24)
    assert args.command == "serve" and args.after_task is None and args.task_acceptance is None
    pre_stop = daemon_container["lifecycle"]["preStop"]["exec"]["command"]
    assert pre_stop[0] == "sleep"
    needed = float(pre_stop[1]) + args.grace + CANCEL_WAIT_SECS + DRAIN_BUDGET_SECONDS
    assert needed <= pod["terminationGracePeriodSeconds"] <= needed + SHUTDOWN_MARGIN_MAX
    assert args.grace == 30  # the systemd unit's --grace too (deploy/murmurd@.service)
    unit = (ROOT / "deploy" / "murmurd@.service").read_text()
    assert "--grace 30" in unit


def test_runs_as_non_root_on_a_read_only_root(pod) -> None:
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True and security["runAsUser"] > 0 and security["runAsGroup"] > 0
    assert pod["automountServiceAccountToken"] is False
    for container in pod["initContainers"] + pod["containers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["capabilities"]["drop"] == ["ALL"], container["name"]
        assert "memory" in container["resources"]["limits"], container["name"]
        assert container["resources"]["requests"], container["name"]


def test_every_mount_has_a_volume_and_only_scratch_is_writable(pod, daemon_container) -> None:
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounted: set[str] = set()
    writable: dict[str, str] = {}
    for container in pod["initContainers"] + pod["containers"]:
        for mount in container["volumeMounts"]:
            assert mount["name"] in volumes, (container["name"], mount["name"])
            mounted.add(mount["name"])
            volume = volumes[mount["name"]]
            if "emptyDir" in volume:
                assert not mount.get("readOnly", False)
                writable[mount["mountPath"]] = mount["name"]
            else:  # configuration and secrets are never writable
                assert mount.get("readOnly") is True, mount
    assert mounted == set(volumes), "a volume nobody mounts"
    daemon_writable = {m["mountPath"] for m in daemon_container["volumeMounts"] if "emptyDir" in volumes[m["name"]]}
    assert daemon_writable == WRITABLE_PATHS
    args = _serve_args(daemon_container)
    env = {e["name"]: e.get("value") for e in daemon_container["env"]}
    for path in (args.capsule_dir, args.state_dir, env["MURMUR_CACHE_DIR"], env["TMPDIR"], env["HOME"]):
        assert path in daemon_writable, path
    # the init container fills the capsule volume the daemon serves from
    (init,) = pod["initContainers"]
    assert args.capsule_dir in shlex.split(init["command"][-1])[-1]


def test_secrets_and_the_capsule_come_from_the_rendered_objects(documents, pod, daemon_container) -> None:
    secrets = {d["metadata"]["name"]: set(d.get("stringData", {})) | set(d.get("data", {}))
               for d in documents if d["kind"] == "Secret"}
    referenced: list[tuple[str, str]] = []
    for container in pod["initContainers"] + pod["containers"]:
        for entry in container.get("env", []):
            ref = entry.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                referenced.append((ref["name"], ref["key"]))
    for volume in pod["volumes"]:
        if "secret" in volume:
            for item in volume["secret"].get("items", []):
                referenced.append((volume["secret"]["secretName"], item["key"]))
            assert volume["secret"]["secretName"] in secrets
    assert referenced and all(key in secrets.get(name, set()) for name, key in referenced), (referenced, secrets)
    env = {e["name"]: e for e in daemon_container["env"]}
    assert env["MURMURD_STORE"]["valueFrom"]["secretKeyRef"] == {"name": "murmurd-store", "key": "url"}
    store_url = next(d for d in documents if d["kind"] == "Secret" and d["metadata"]["name"] == "murmurd-store")
    assert store_url["stringData"]["url"].startswith("postgresql://")
    # the token file the daemon is told to read is the auth Secret's key, at its mount
    auth_mount = next(m for m in daemon_container["volumeMounts"] if m["name"] == "auth")
    token_file = daemon_container["args"][daemon_container["args"].index("--token-file") + 1]
    assert Path(token_file).parent == Path(auth_mount["mountPath"]) and Path(token_file).name in secrets["murmurd-auth"]
    # every configMap volume names a rendered ConfigMap
    config_maps = {d["metadata"]["name"] for d in documents if d["kind"] == "ConfigMap"}
    assert {v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v} == config_maps


def test_the_capsule_config_map_is_a_valid_capsule(documents, tmp_path: Path) -> None:
    capsule = _one(documents, "ConfigMap")["data"]
    for name, text in capsule.items():
        (tmp_path / name).write_text(text)
    manifest, report = load_capsule(tmp_path, {"ANTHROPIC_API_KEY": "sk-ant-test"})
    assert report.ok, report.to_text()
    assert manifest.lifecycle.after_task == "sleep" and manifest.lifecycle.task_acceptance == "queue"


def test_service_budget_and_autoscaler_select_the_deployment(documents, pod, daemon_container) -> None:
    deployment = _one(documents, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = _one(documents, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert {p["targetPort"] for p in service["spec"]["ports"]} <= {p["name"] for p in daemon_container["ports"]}
    assert _one(documents, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= labels.items()
    target = _one(documents, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert _one(documents, "HorizontalPodAutoscaler")["spec"]["minReplicas"] >= 2  # the budget leaves one up
    strategy = deployment["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics"


# -- the image -------------------------------------------------------------------------------


def _dockerfile() -> dict[str, list[str]]:
    """Each instruction's arguments, in order (continuation lines joined, blanks squeezed)."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    found: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.setdefault(word.upper(), []).append(" ".join(rest.split()))
    return found


def test_the_image_matches_the_deployment(pod, daemon_container) -> None:
    image = _dockerfile()
    user, _, group = image["USER"][-1].partition(":")
    assert user.isdigit() and int(user) == pod["securityContext"]["runAsUser"] != 0  # runAsNonRoot can check it
    assert group.isdigit() and int(group) == pod["securityContext"]["runAsGroup"]
    assert f"useradd --system --uid {user}" in " ".join(image["RUN"])
    assert json.loads(image["ENTRYPOINT"][-1]) == ["murmurd"]
    default = build_parser().parse_args(json.loads(image["CMD"][-1]))
    assert default.command == "serve" and default.host == "0.0.0.0" and default.after_task is None
    assert image["EXPOSE"] == [str(default.port)]
    deployed = _serve_args(daemon_container)
    assert deployed.port == default.port and deployed.state_dir == default.state_dir
    assert "command" not in daemon_container  # the image's ENTRYPOINT (murmurd) runs the args
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(image["ENV"])))
    assert env["MURMUR_CACHE_DIR"] == {e["name"]: e.get("value") for e in daemon_container["env"]}["MURMUR_CACHE_DIR"]


# -- the pod's filesystem, for real ------------------------------------------------------------


def _pod_path(mapping: dict[str, Path], pod_path: str) -> str:
    """A pod path as this machine's directory standing in for its volume."""
    for mount, local in mapping.items():
        if pod_path == mount or pod_path.startswith(mount + "/"):
            return str(local / Path(pod_path).relative_to(mount))
    raise AssertionError(f"{pod_path} is on no volume")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root to make a read-only root filesystem in a mount namespace")
def test_the_daemon_serves_with_only_the_pods_writable_volumes(documents, pod, daemon_container, tmp_path: Path) -> None:
    """`murmurd serve` with the Deployment's arguments, in a mount namespace whose root is
    read-only and where only the emptyDir volumes' stand-ins are writable: it stages (building
    into the cache volume), opens the task store, answers /readyz, and stops on SIGTERM."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    scratch = {m["mountPath"]: tmp_path / m["name"] for m in daemon_container["volumeMounts"]
               if "emptyDir" in volumes[m["name"]]}
    scratch["/var/cache/murmurd"] = cache_dir()  # the machine's component cache stands in for the volume
    for local in scratch.values():
        local.mkdir(parents=True, exist_ok=True)
    # the init container's copy, from the rendered ConfigMap
    for name, text in _one(documents, "ConfigMap")["data"].items():
        (Path(_pod_path(scratch, "/var/lib/murmurd/capsule")) / name).write_text(text)
    args = list(daemon_container["args"])
    token = tmp_path / "auth-token"  # the Secret's mount, read-only in the pod
    token.write_text("t" * 40 + "\n")
    args[args.index("--token-file") + 1] = str(token)
    args[1] = _pod_path(scratch, args[1])
    args[args.index("--state-dir") + 1] = _pod_path(scratch, args[args.index("--state-dir") + 1])
    args[args.index("--port") + 1] = "0"
    args[args.index("--host") + 1] = "127.0.0.1"
    env = {e["name"]: e["value"] for e in daemon_container["env"] if "value" in e}
    env = {k: _pod_path(scratch, v) if v.startswith("/") else v for k, v in env.items()}
    env["ANTHROPIC_API_KEY"] = "sk-ant-never-used"  # the Secret's; no task is sent
    binds = "".join(f"mount --bind {shlex.quote(str(d))} {shlex.quote(str(d))}; " for d in scratch.values())
    script = (f"set -e; mount --make-rprivate /; {binds}mount -o remount,bind,ro /; "
              f"touch {shlex.quote(str(ROOT / 'pyproject.toml'))} 2>/dev/null && exit 97; "
              f"exec {shlex.quote(sys.executable)} -m murmurd " + " ".join(shlex.quote(a) for a in args))
    proc = subprocess.Popen(["unshare", "-m", "sh", "-c", script], cwd=ROOT, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            env={"PATH": os.environ["PATH"], "PYTHONDONTWRITEBYTECODE": "1", **env})
    try:
        url = _served_url(proc, timeout=300)
        ready = httpx.get(url + "/readyz", timeout=10)
        assert ready.status_code == 200, ready.text
        assert httpx.post(url + "/", json={}, timeout=10).status_code == 401  # everything else needs the token
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=pod["terminationGracePeriodSeconds"]) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    workdirs = list((Path(args[1]) / "workdir").glob("ses_*/trace.jsonl"))
    assert workdirs, "the session workdir was written on the capsule volume"


def _served_url(proc: subprocess.Popen[str], timeout: float) -> str:
    lines: list[str] = []
    found: dict[str, str] = {}
    done = threading.Event()

    def drain() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if line.startswith("murmur: url "):
                found["url"] = "http://" + line.split()[-1]
            if line.startswith("session: "):
                done.set()
        done.set()

    threading.Thread(target=drain, daemon=True).start()
    if not done.wait(timeout) or "url" not in found:
        proc.kill()
        raise AssertionError("murmurd serve did not start on the read-only root:\n" + "".join(lines))
    return found["url"]
