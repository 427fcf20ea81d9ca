import shlex
import shutil
import subprocess
from pathlib import Path

CHART = Path(__file__).resolve().parents[2] / "helm" / "boundless"


def test_helm_lint_and_template():
    helm = shutil.which("helm")
    assert helm, "helm not on PATH: `make test` installs it into .tools/bin"
    lint = subprocess.run([helm, "lint", str(CHART)], capture_output=True, text=True, timeout=120)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    out = subprocess.run([helm, "template", "demo", str(CHART)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for kind in ("StatefulSet", "Deployment", "HorizontalPodAutoscaler", "Service"):
        assert f"kind: {kind}" in out.stdout


def test_every_daemon_the_chart_runs_takes_its_arguments():
    """The chart's container args parse with boundless's own parser (a renamed or removed
    flag would crash the pod at start)."""
    import yaml

    from boundless.cli import build_parser

    helm = shutil.which("helm")
    assert helm
    out = subprocess.run([helm, "template", "demo", str(CHART)], capture_output=True, text=True, timeout=120, check=True)
    commands = []
    for doc in yaml.safe_load_all(out.stdout):
        spec = ((doc or {}).get("spec") or {}).get("template", {}).get("spec", {})
        for container in spec.get("containers", []):
            args = [str(a) for a in container.get("args", [])]
            if len(args) == 1 and "exec boundless " in args[0]:  # a shell line (the ordinal from HOSTNAME)
                args = shlex.split(args[0].split("exec boundless ", 1)[1].replace('"${HOSTNAME##*-}"', "0"))
            if args:
                build_parser(args[0]).parse_args(args)  # SystemExit on an unknown flag
                commands.append(args[0])
    assert {"ps", "train", "serve"} <= set(commands), commands
