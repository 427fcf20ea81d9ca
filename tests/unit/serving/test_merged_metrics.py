"""One metrics endpoint over several serving processes: every sample keeps its labels and
gains its process's index; a process that did not answer reads 0 in process_up."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from serving.merged_metrics import merge


def _families(count: float) -> list:
    registry = CollectorRegistry()
    Counter("boundless_serving_requests", "Predict requests", ["code"], registry=registry).labels("OK").inc(count)
    return list(text_string_to_metric_families(generate_latest(registry).decode()))


def test_samples_gain_the_process_label_and_a_silent_process_reads_down():
    merged = {m.name: m for m in merge({0: _families(3), 1: _families(5), 2: None})}
    requests = [s for s in merged["boundless_serving_requests"].samples if s.name.endswith("_total")]
    assert sorted((s.labels["process"], s.labels["code"], s.value) for s in requests) == [("0", "OK", 3.0), ("1", "OK", 5.0)]
    up = {s.labels["process"]: s.value for s in merged["boundless_serving_process_up"].samples}
    assert up == {"0": 1.0, "1": 1.0, "2": 0.0}
    registry = CollectorRegistry()

    class Fixed:
        def collect(self):  # noqa: ANN202 - a collector for generate_latest
            return list(merged.values())

    registry.register(Fixed())  # type: ignore[arg-type]
    text = generate_latest(registry).decode()  # the merged families are valid exposition
    assert 'boundless_serving_requests_total{code="OK",process="1"} 5.0' in text
