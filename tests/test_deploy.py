"""Offline validation of the deploy/ recipes (no Docker, Kubernetes or SLURM needed).

- every YAML file parses;
- deploy/dask.yaml and deploy/tls/dask-tls.yaml validate against the schema
  shipped with distributed and only use keys distributed knows;
- the DaskCluster and DaskJob manifests validate against the dask-kubernetes
  operator's CRD schema (vendored subset, tests/data/) and agree with the other
  manifests (volume claim, secret, service selector, memory limits), and the
  job's command line parses with daskdepth's own parser;
- the Helm values only set keys of the dask chart's values (vendored);
- the compose file and the Dockerfile agree (build context, targets, shared
  volume, scheduler address, Dask version);
- the SLURM script renders its worker job script with dask-jobqueue's
  ``job_script()`` without submitting anything.
"""

from __future__ import annotations

import copy
import importlib.util
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed
import pytest
import yaml
from dask.utils import parse_bytes

jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DATA = Path(__file__).resolve().parent / "data"
K8S = DEPLOY / "kubernetes"
DNS_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _paths(node: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(key path, value) of every leaf of nested mappings."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from _paths(value, (*prefix, str(key)))
    else:
        yield prefix, node


# --------------------------------------------------------------------------- all files


YAML_FILES = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def test_deploy_tree_is_complete():
    for sub in ("docker", "kubernetes", "hpc", "tls"):
        assert (DEPLOY / sub / "README.md").is_file(), f"deploy/{sub}/README.md is missing"
    assert (DEPLOY / "README.md").is_file()
    assert len(YAML_FILES) >= 8, YAML_FILES


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_yaml_parses(path):
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    assert docs and all(isinstance(d, dict) for d in docs)


# --------------------------------------------------------------------------- dask config


DISTRIBUTED_DIR = Path(distributed.__file__).parent


@pytest.fixture(scope="module")
def distributed_schema() -> dict:
    return _load(DISTRIBUTED_DIR / "distributed-schema.yaml")


@pytest.mark.parametrize("name", ["dask.yaml", "tls/dask-tls.yaml"])
def test_dask_config_matches_distributed_schema(name, distributed_schema):
    config = _load(DEPLOY / name)
    jsonschema.validate(config, distributed_schema)
    # The schema accepts unknown keys; the defaults tell which keys exist.
    defaults = dict(_paths(_load(DISTRIBUTED_DIR / "distributed.yaml")))
    for path, _ in _paths(config):
        assert path in defaults, f"{name}: {'.'.join(path)} is not a distributed setting"


def test_dask_config_bad_value_is_caught(distributed_schema):
    config = _load(DEPLOY / "tls" / "dask-tls.yaml")
    config["distributed"]["comm"]["tls"]["min-version"] = 1.1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(config, distributed_schema)


def test_tls_config_gives_a_tls_security():
    import dask
    from distributed.security import Security

    with dask.config.set({"distributed.comm." + ".".join(p[2:]): v for p, v in
                          _paths(_load(DEPLOY / "tls" / "dask-tls.yaml"))}):
        sec = Security()
    assert sec.require_encryption
    assert sec.tls_ca_file == "/etc/dask/tls/ca.pem"
    assert sec.tls_worker_cert == "/etc/dask/tls/worker.pem"
    assert sec.tls_client_key == "/etc/dask/tls/client-key.pem"


# --------------------------------------------------------------------------- Kubernetes


@pytest.fixture(scope="module")
def crd_schema() -> dict:
    return _load(DATA / "dask-operator-crd-schema.yaml")


def _validate_resource(doc: dict, kind: str, crd_schema: dict) -> None:
    assert doc["apiVersion"] == "kubernetes.dask.org/v1"
    assert doc["kind"] == kind
    assert DNS_1123.match(doc["metadata"]["name"]), doc["metadata"]["name"]
    schema = {"$defs": crd_schema["$defs"], "$ref": f"#/$defs/{kind}"}
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "metadata")}
    jsonschema.Draft202012Validator(schema).validate(body)


MANIFESTS = {"daskcluster.yaml": "DaskCluster", "daskjob.yaml": "DaskJob"}


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_manifest_matches_operator_crd(name, crd_schema):
    _validate_resource(_load(K8S / name), MANIFESTS[name], crd_schema)


@pytest.mark.parametrize("mutate", [
    lambda d: d["spec"]["worker"].update(replica=2),  # misspelt field
    lambda d: d["spec"]["worker"]["spec"]["containers"][0]["resources"]["limits"].update(
        memory="8GiB"),  # not a Kubernetes quantity
    lambda d: d["spec"]["scheduler"].pop("service"),  # required by the CRD
    lambda d: d["spec"]["worker"]["spec"]["containers"][0].update(imagePullPolicy="Sometimes"),
], ids=["typo", "quantity", "required", "enum"])
def test_crd_schema_catches_mistakes(mutate, crd_schema):
    doc = copy.deepcopy(_load(K8S / "daskcluster.yaml"))
    mutate(doc)
    with pytest.raises(jsonschema.ValidationError):
        _validate_resource(doc, "DaskCluster", crd_schema)


def _cluster_spec(name: str) -> dict:
    doc = _load(K8S / name)
    return doc["spec"]["cluster"]["spec"] if doc["kind"] == "DaskJob" else doc["spec"]


def _pods(name: str) -> Iterator[dict]:
    doc = _load(K8S / name)
    spec = _cluster_spec(name)
    yield spec["worker"]["spec"]
    yield spec["scheduler"]["spec"]
    if doc["kind"] == "DaskJob":
        yield doc["spec"]["job"]["spec"]


@pytest.mark.parametrize("name", sorted(MANIFESTS))
def test_manifests_agree_with_each_other(name):
    doc = _load(K8S / name)
    claim = _load(K8S / "results-pvc.yaml")
    secret = _load(K8S / "object-storage-secret.example.yaml")
    assert claim["kind"] == "PersistentVolumeClaim"
    assert "ReadWriteMany" in claim["spec"]["accessModes"]
    assert secret["kind"] == "Secret"
    spec = _cluster_spec(name)
    # The scheduler service selects the scheduler pod of this cluster (the
    # operator names a DaskJob's cluster after the job).
    selector = spec["scheduler"]["service"]["selector"]
    assert selector["dask.org/cluster-name"] == doc["metadata"]["name"]
    ports = {p["name"]: p for p in spec["scheduler"]["service"]["ports"]}
    assert ports["tcp-comm"]["port"] == 8786
    for pod in _pods(name):
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in pod["containers"]:
            for mount in c.get("volumeMounts", []):
                volume = volumes[mount["name"]]
                assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
            for source in c.get("envFrom", []):
                assert source["secretRef"]["name"] == secret["metadata"]["name"]
    # Workers: --memory-limit equals the container limit; the outputs volume is mounted.
    worker = spec["worker"]["spec"]["containers"][0]
    args = worker["args"]
    assert args[:2] == ["dask", "worker"]
    limit = parse_bytes(args[args.index("--memory-limit") + 1])
    assert limit == parse_bytes(worker["resources"]["limits"]["memory"])
    assert "$(DASK_WORKER_NAME)" in args
    assert any(m["mountPath"] == "/data" for m in worker["volumeMounts"])


def test_daskjob_runs_a_valid_daskdepth_command():
    from daskdepth.cli import build_parser

    job = _load(K8S / "daskjob.yaml")["spec"]["job"]["spec"]
    container = job["containers"][0]
    args = container["args"]
    assert args[0] == "daskdepth"
    assert "$(DASK_SCHEDULER_ADDRESS)" in args  # set by the operator in the runner pod
    # Kubernetes expands $(VAR) in args before the container starts, as here.
    address = "tcp://daskdepth-scheduler.default.svc.cluster.local:8786"
    args = [a.replace("$(DASK_SCHEDULER_ADDRESS)", address) for a in args]
    parsed = build_parser().parse_args(args[1:])  # exits (SystemExit) on a bad option
    assert parsed.command == "score"
    assert parsed.scheduler == address
    assert parsed.input.startswith("s3://")
    assert parsed.out.startswith("/data/")  # outputs go to the shared volume
    assert job["restartPolicy"] == "Never"


def test_helm_values_only_use_chart_keys():
    values = _load(K8S / "helm-values.yaml")
    chart = _load(DATA / "dask-helm-chart-values.yaml")

    def check(ours: Any, theirs: Any, where: str) -> None:
        if theirs in ({}, [], None) or not isinstance(theirs, dict):
            if isinstance(theirs, (bool, int, str)) and theirs not in ({}, [], None):
                assert type(ours) is type(theirs), f"{where}: {ours!r} is not a {type(theirs)}"
            return  # a free-form value (Kubernetes object, list or null default)
        assert isinstance(ours, dict), f"{where} must be a mapping"
        for key, value in ours.items():
            assert key in theirs, f"{where}.{key} is not a value of the dask chart"
            check(value, theirs[key], f"{where}.{key}")

    check(values, chart, "values")
    worker = values["worker"]
    assert parse_bytes(worker["resources"]["limits"]["memory"].replace("Gi", "GiB")) > 0
    mounts = worker["mounts"]
    assert {m["name"] for m in mounts["volumeMounts"]} <= {v["name"] for v in mounts["volumes"]}
    claim = _load(K8S / "results-pvc.yaml")["metadata"]["name"]
    assert mounts["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim


# --------------------------------------------------------------------------- Docker


COMPOSE = DEPLOY / "docker" / "compose.yaml"
DOCKERFILE = DEPLOY / "docker" / "Dockerfile"


def _dockerfile_stages() -> dict[str, str]:
    stages = {}
    for line in DOCKERFILE.read_text().splitlines():
        m = re.match(r"^FROM\s+(\S+)\s+AS\s+(\S+)", line, re.IGNORECASE)
        if m:
            stages[m.group(2)] = m.group(1)
    return stages


def test_dockerfile_builds_on_official_dask_images():
    text = DOCKERFILE.read_text()
    stages = _dockerfile_stages()
    assert stages["runtime"].startswith("ghcr.io/dask/dask:${DASK_VERSION}")
    assert stages["notebook"].startswith("ghcr.io/dask/dask-notebook:${DASK_VERSION}")
    assert re.search(r"^ARG DASK_VERSION=\d{4}\.\d+\.\d+$", text, re.MULTILINE)
    # Every COPY source exists in the build context (the repository root) and
    # is not excluded by the Dockerfile's .dockerignore.
    ignore = (DEPLOY / "docker" / "Dockerfile.dockerignore").read_text()
    for line in text.splitlines():
        if line.startswith("COPY"):
            sources = [w for w in line.split()[1:-1] if not w.startswith("--")]
            for src in sources:
                assert (ROOT / src).exists(), f"COPY source {src} missing"
                assert f"!{src}" in ignore, f"{src} is excluded from the build context"
    # The package is installed with dask/distributed pinned to the image's version.
    assert '"dask==${DASK_VERSION}" "distributed==${DASK_VERSION}"' in text


def test_compose_file_is_consistent():
    compose = _load(COMPOSE)
    services = compose["services"]
    assert set(services) == {"scheduler", "worker", "jupyter"}
    stages = _dockerfile_stages()
    version = re.search(r"^ARG DASK_VERSION=(\S+)$", DOCKERFILE.read_text(), re.MULTILINE)[1]
    for name, service in services.items():
        build = service["build"]
        context = (COMPOSE.parent / build["context"]).resolve()
        assert context == ROOT, f"{name}: build context {context}"
        assert (context / build["dockerfile"]).resolve() == DOCKERFILE
        assert build["target"] in stages
        assert build["args"]["DASK_VERSION"] == version
        # Inputs and outputs are at the same path for the client and the workers.
        assert "data:/data" in service["volumes"], name
    assert "data" in compose["volumes"]
    sched = services["scheduler"]
    assert sched["command"][:2] == ["dask", "scheduler"]
    port = sched["command"][sched["command"].index("--port") + 1]
    assert f"{port}:{port}" in sched["ports"]
    address = f"tcp://scheduler:{port}"
    worker = services["worker"]
    assert worker["command"][:3] == ["dask", "worker", address]
    limit = worker["command"][worker["command"].index("--memory-limit") + 1]
    # Docker memory units are binary: 4G is 4 GiB, the worker's 4GiB.
    docker_limit = worker["deploy"]["resources"]["limits"]["memory"]
    assert parse_bytes(limit) == parse_bytes(docker_limit.upper().rstrip("B") + "iB")
    assert worker["deploy"]["replicas"] >= 1
    assert services["jupyter"]["environment"]["DASK_SCHEDULER_ADDRESS"] == address
    assert services["jupyter"]["build"]["target"] == "notebook"


def test_docker_readme_says_docker_was_not_run():
    text = (DEPLOY / "docker" / "README.md").read_text().lower()
    assert "not been built" in text or "not built" in text


# --------------------------------------------------------------------------- SLURM


def _slurm_module() -> Any:
    pytest.importorskip("dask_jobqueue")
    spec = importlib.util.spec_from_file_location("score_slurm", DEPLOY / "hpc/score_slurm.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_slurm_job_script_renders(capsys):
    module = _slurm_module()
    argv = ["/scratch/u/x.zarr", "--out", "/scratch/u/depth.zarr", "--queue", "compute",
            "--account", "proj42", "--cores", "32", "--memory", "128GB", "--processes", "4",
            "--walltime", "02:00:00", "--prologue", "module load python/3.11",
            "--directive=--constraint=cpu", "--print-job-script", "--", "--tol", "1e-4"]
    own, passthrough = module.split_argv(argv)
    assert passthrough == ["--tol", "1e-4"]
    args = module.build_parser().parse_args(own)
    cluster = module.build_cluster(args)
    try:
        script = cluster.job_script()  # rendered, not submitted
    finally:
        cluster.close()
    lines = script.splitlines()
    for directive in ("#SBATCH -p compute", "#SBATCH -A proj42", "#SBATCH --cpus-per-task=32",
                      "#SBATCH -t 02:00:00", "#SBATCH --constraint=cpu"):
        assert directive in lines, script
    assert "module load python/3.11" in lines
    worker = next(ln for ln in lines if "distributed.cli.dask_worker" in ln)
    assert "--nthreads 8" in worker and "--nworkers 4" in worker
    assert "--death-timeout 60" in worker
    memory = re.search(r"--memory-limit (\S+)", worker)[1]
    assert 28 * 2**30 < parse_bytes(memory) <= 32e9
    # main() with --print-job-script prints the same script and submits nothing.
    assert module.main(argv) == 0
    printed = capsys.readouterr().out
    assert "#SBATCH -A proj42" in printed


def test_slurm_driver_script_is_valid_bash():
    result = subprocess.run(["bash", "-n", str(DEPLOY / "hpc" / "driver.sbatch")],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    text = (DEPLOY / "hpc" / "driver.sbatch").read_text()
    assert "score_slurm.py" in text and "#SBATCH" in text


def test_make_certs_script_runs(tmp_path):
    pytest.importorskip("cryptography")
    result = subprocess.run([sys.executable, str(DEPLOY / "tls" / "make_certs.py"),
                             "--out", str(tmp_path / "tls")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    config = _load(DEPLOY / "tls" / "dask-tls.yaml")
    for path, value in _paths(config):
        if path[-1] in ("cert", "key", "ca-file"):
            assert (tmp_path / "tls" / Path(value).name).is_file(), value
