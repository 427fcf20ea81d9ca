from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from boundless.processes import Daemon, start


@dataclass
class Platform:
    dir: Path
    shards: list[Daemon]
    manager: Daemon
    serving: Daemon

    @property
    def ps_addresses(self) -> str:
        return ",".join(s.address for s in self.shards)

    def train(self, source: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable,
            "-m",
            "boundless",
            "train",
            "--source",
            str(source),
            "--ps",
            self.ps_addresses,
            "--no-follow",
            "--export-dir",
            str(self.dir / "exports"),
            "--metrics-port",
            "-1",
            *extra,
        ]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    def model_cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "boundless", "model", *args, "--repo", str(self.dir / "repo")],
            capture_output=True,
            text=True,
            timeout=60,
        )


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    daemons: list[Daemon] = []
    try:
        ps_args = ["ps", "--shard-count", "2", "--export-root", str(tmp_path / "exports")]
        shards = [start(f"ps{i}", [*ps_args, "--shard-index", str(i)], tmp_path) for i in range(2)]
        daemons += shards
        manager = start(
            "modelmgr",
            ["model", "watch", "--exports", str(tmp_path / "exports"), "--repo", str(tmp_path / "repo"), "--poll-s", "0.2"],
            tmp_path,
        )
        serving = start("serving", ["serve", "--repo", str(tmp_path / "repo"), "--poll-s", "0.2"], tmp_path)
        daemons += [manager, serving]
        for d in daemons:
            d.wait_ready()
        yield Platform(tmp_path, shards, manager, serving)
        for d in daemons:
            d.check()  # none of them may have died during the test
    finally:
        for d in daemons:
            d.stop()
