"""The chart lints, renders for the default values, for a Kafka + S3 + TLS values file, for
a trainer of 4 GPU ranks and for a trainer following an S3 prefix, and every rendered manifest validates against the Kubernetes
schemas. Its containers'
arguments parse with boundless's own parser, every mount names a volume, every pod runs as
a non-root user, and the trainer reads only what is mounted."""

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from boundless.cli import build_parser

CHART = Path(__file__).resolve().parents[2] / "helm" / "boundless"
VALUES = {
    "default": None,
    "kafka-s3-tls": CHART / "ci" / "kafka-s3-tls-values.yaml",
    "ranks-gpu": CHART / "ci" / "ranks-gpu-values.yaml",
    "s3-source": CHART / "ci" / "s3-source-values.yaml",
}
KUBERNETES = "1.33.0"
CRDS = {"ServiceMonitor"}  # the Prometheus Operator's: no schema in kubernetes-validate


def _helm() -> str:
    helm = shutil.which("helm")
    assert helm, "helm not on PATH: `make test` installs it into .tools/bin"
    return helm


def _render(values: Path | None, *sets: str) -> list[dict[str, Any]]:
    cmd = [_helm(), "template", "demo", str(CHART), *(["-f", str(values)] if values else [])]
    cmd += [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def _pods(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def _args(container: dict[str, Any]) -> list[str]:
    args = [str(a) for a in container.get("args", [])]
    if len(args) == 1 and "exec boundless " in args[0]:  # a shell line (the ordinal from HOSTNAME)
        args = shlex.split(args[0].split("exec boundless ", 1)[1].replace('"${HOSTNAME##*-}"', "0"))
    return args


def test_helm_lint():
    lint = subprocess.run([_helm(), "lint", str(CHART)], capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("values", list(VALUES), ids=list(VALUES))
def test_every_manifest_validates_against_the_kubernetes_schemas(values):
    docs = _render(VALUES[values])
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Deployment", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Service"} <= kinds
    for doc in docs:
        if doc["kind"] in CRDS:
            assert doc["apiVersion"] == "monitoring.coreos.com/v1" and doc["spec"]["endpoints"]
            continue
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)  # raises on any error


@pytest.mark.parametrize("values", list(VALUES), ids=list(VALUES))
def test_every_daemon_the_chart_runs_takes_its_arguments_and_its_mounts_exist(values):
    """A renamed flag, a mount of a volume that is not there or a path that is not mounted
    would crash the pod at start."""
    commands = {}
    for name, pod in _pods(_render(VALUES[values])):
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            mounts = container.get("volumeMounts", [])
            assert {m["name"] for m in mounts} <= volumes | {"state"}, name  # state: the StatefulSet's claim
            args = _args(container)
            build_parser(args[0]).parse_args(args)  # SystemExit on an unknown flag
            commands[args[0]] = (args, [m["mountPath"] for m in mounts])
            env = {e["name"] for e in container.get("env", [])}
            assert "NUMBA_CACHE_DIR" in env and "/cache" in [m["mountPath"] for m in mounts], name
            for i, a in enumerate(args):
                if a.startswith("/etc/boundless/") or (i and args[i - 1] in ("--export-dir", "--export-root", "--exports")):
                    assert any(a.startswith(p + "/") for p in commands[args[0]][1]), f"{name}: {a} is not mounted"
    assert set(commands) == {"ps", "train", "serve", "model"}, commands
    train, mounts = commands["train"]
    source = train[train.index("--source") + 1]
    assert source.startswith(("kafka://", "s3://")) or any(source.startswith(p + "/") for p in mounts), source
    if values == "kafka-s3-tls":
        for args, _ in commands.values():
            assert "--tls-cert" in args and "--tls-ca" in args
        assert "--tls-client-auth" in commands["serve"][0] and "--accepted-tokens-file" in commands["ps"][0]
        assert "--token-file" in train
        assert train[train.index("--kafka-config") + 1] == "/etc/boundless/kafka/kafka.properties"  # a Secret's file


def test_an_s3_source_gives_the_trainer_its_endpoint_and_keys():
    docs = _render(VALUES["s3-source"])
    trainer = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "demo-boundless-trainer")
    container = trainer["spec"]["template"]["spec"]["containers"][0]
    args = [str(a) for a in container["args"]]
    assert args[args.index("--source") + 1] == "s3://clicks/parquet/day=2026-11-27/"
    env = {e["name"]: e for e in container["env"]}
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio.storage:9000"
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == "stream-s3"


def test_the_trainer_runs_as_ranks_that_meet_at_rank_0():
    """trainer.replicas pods of a StatefulSet: pod i is rank i (the pod-index label), every
    rank meets at pod 0 through the headless Service, and each asks for its GPU."""
    docs = _render(VALUES["ranks-gpu"])
    sets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "StatefulSet"}
    trainer = sets["demo-boundless-trainer"]
    assert trainer["spec"]["replicas"] == 4 and trainer["spec"]["podManagementPolicy"] == "Parallel"
    service = next(d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == trainer["spec"]["serviceName"])
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"] is True
    container = trainer["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["RANK"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['apps.kubernetes.io/pod-index']"
    assert env["WORLD_SIZE"]["value"] == "4"
    assert env["MASTER_ADDR"]["value"] == "demo-boundless-trainer-0.demo-boundless-trainer"
    assert int(env["MASTER_PORT"]["value"]) in {p["port"] for p in service["spec"]["ports"]}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    one = next(d for d in _render(None) if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "demo-boundless-trainer")
    assert "RANK" not in {e["name"] for e in one["spec"]["template"]["spec"]["containers"][0]["env"]}  # one rank: alone


@pytest.mark.parametrize(("cpu", "threads"), [("2500m", "2"), ("4", "4"), ("0.5", "1"), ("250m", "1"), (None, None)])
def test_the_trainer_takes_torch_threads_from_its_cpu_limit(cpu: str | None, threads: str | None) -> None:
    """A pod's torch would otherwise start a thread per core of the node, under a quota of a few."""
    docs = _render(None, *([f"trainer.resources.limits.cpu={cpu}"] if cpu else []))
    trainer = next(d for d in docs if d["kind"] == "StatefulSet" and d["metadata"]["name"] == "demo-boundless-trainer")
    env = {e["name"]: e.get("value") for e in trainer["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env.get("OMP_NUM_THREADS") == threads
