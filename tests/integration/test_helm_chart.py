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
