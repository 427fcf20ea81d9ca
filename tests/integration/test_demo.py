"""`boundless demo --source kafka`: the synthetic stream through a local Kafka broker, and
the report it draws at the end."""

from __future__ import annotations

import json
import re
import subprocess
import sys

# librdkafka's log lines: "%LEVEL|time|FAC|client| text", syslog levels (0-4: emergencies
# to warnings; 5-7: notices, info and debug, which say nothing went wrong)
RDKAFKA_WARNING = re.compile(r"^%[0-4]\|.*rdkafka", re.MULTILINE)


def test_demo_trains_from_a_kafka_topic(tmp_path):
    cmd = [sys.executable, "-m", "boundless", "demo", "--source", "kafka", "--duration", "6", "--requests", "20"]
    proc = subprocess.run([*cmd, "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "started a Kafka broker (Tansu)" in proc.stdout
    # the producer closes before its broker stops: no reconnection errors or warnings at the end
    assert not RDKAFKA_WARNING.search(proc.stderr), proc.stderr[-2000:]
    summary = json.loads((tmp_path / "demo.json").read_text())
    assert summary["samples"] >= 6 * 15000 and summary["bad_lines"] == 0
    assert summary["versions"] >= 2 and summary["window_auc"] > 0.65
    for png in ("training.png", "latency.png", "versions.png"):  # the report it draws
        assert (tmp_path / "report" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
