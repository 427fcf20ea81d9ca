"""Without the optional dependencies (torch, confluent-kafka, boto3, cryptography, matplotlib)
the core works, LR/FM/FFM serving included, and a feature that needs one says in one line
which extra to install."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.serving_model import publish, requests, spec_for
from ctr.repository.versions import Repository

ROOT = Path(__file__).resolve().parents[4]
# a Python without the extras: their imports fail as a missing package's would
WITHOUT_EXTRAS = """
import importlib.abc, sys
BLOCKED = {"torch", "confluent_kafka", "boto3", "botocore", "cryptography", "matplotlib"}
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NotInstalled())
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRAS + code, *args], capture_output=True, text=True, cwd=ROOT, timeout=180
    )


@pytest.mark.slow
def test_the_core_serves_lr_fm_ffm_and_names_the_extra_for_a_dnn(tmp_path):
    repo = Repository(tmp_path / "repo", "ctr")
    for version, model in enumerate(("lr", "fm", "ffm", "wdl"), start=1):
        publish(repo, version, spec_for(model, k=4, hidden=(8,)), requests(1, items=3), keys=300, shards=1)
    code = """
import json, sys
import serving.daemon, serving.client, trainer.daemon, ps.server.daemon, modelmgr.cli  # every daemon's module
from bench.serving_model import requests
from ctr.model.spec import ModelSpec
from ctr.repository.versions import MANIFEST, Repository
from ctr.runtime.extras import MissingExtra
from serving.loading.servable import load
from serving.request.encoding import decode, field_hash_ids
from trainer.step.factorization import build_model
repo = Repository(sys.argv[1], "ctr")
out = {}
for version in (1, 2, 3, 4):
    d = repo.path(version)
    m = json.loads((d / MANIFEST).read_text())
    try:
        model = load(d, m, m, d, [], None)
        req = decode(requests(1, items=3)[0], model.spec.field_count, field_hash_ids(model.spec.fields))
        out[model.spec.type] = len(model.score(req))
    except MissingExtra as e:
        out[str(version)] = str(e)
try:
    build_model(ModelSpec("deepfm", fields=("a", "b")))
except MissingExtra as e:
    out["train deepfm"] = str(e)
build_model(ModelSpec("ffm", fields=("a", "b")))
print(json.dumps(out))
"""
    done = _run(code, str(repo.root))
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["lr"] == out["fm"] == out["ffm"] == 3  # scored without torch
    assert "pip install 'boundless[dnn]'" in out["4"], out
    assert "pip install 'boundless[dnn]'" in out["train deepfm"], out


@pytest.mark.parametrize(("command", "extra"), [(["certs", "--out", "{tmp}/c"], "tls"), (["report", "{tmp}"], "report")])
def test_a_command_whose_extra_is_missing_says_which_in_one_line(tmp_path, command, extra):
    args = [a.format(tmp=tmp_path) for a in command]
    done = _run("from boundless.cli import main\nsys.exit(main(sys.argv[1:]))\n", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'boundless[{extra}]'" in lines[0], done.stderr
