"""A full export disk no longer stops the trainer (it exited 2 on ENOSPC and left half an
export behind): the export is removed, counted and logged, training goes on, and the next
export is a full one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def test_a_full_export_disk_skips_exports_and_training_goes_on(data_dir: Path, tmp_path: Path):
    exports = tmp_path / "exports"
    exports.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(exports)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not allowed here")
    try:
        lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:40000]
        src = tmp_path / "s.libfm"
        src.write_text("\n".join(lines) + "\n")
        out = tmp_path / "m.json"
        cmd = [sys.executable, "-m", "boundless", "train", "--source", str(src), "--model", "fm", "--ps", "local"]
        cmd += ["--export-dir", str(exports), "--export-interval-s", "0", "--batch-size", "2000", "--holdout-samples", "500"]
        cmd += ["--metrics-port", "-1", "--port", "-1", "--metrics-out", str(out)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        result = json.loads(out.read_text())
        assert result["samples"] + result["held_out_samples"] == 40000
        assert "not written" in proc.stderr or "could not be written" in proc.stderr
        for folder in exports.iterdir():  # what is left is whole: READY with its export.json, or nothing
            if (folder / "READY").exists():
                assert json.loads((folder / "export.json").read_text())["holdout"]["samples"] > 0
    finally:
        subprocess.run(["umount", "-l", str(exports)], capture_output=True)
