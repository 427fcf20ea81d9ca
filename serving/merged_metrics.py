"""One Prometheus endpoint for several serving processes: each scrape reads every
process's own endpoint and serves the union, each sample labelled with its process's
index (`process="0"`...), so one scrape target still sees the whole server. A process
that does not answer in time is left out of that scrape (its `boundless_serving_process_up`
reads 0) rather than failing it."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

SCRAPE_TIMEOUT_S = 2.0


def scrape(url: str, timeout: float = SCRAPE_TIMEOUT_S) -> list[Metric]:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - the processes' own loopback endpoints
        return list(text_string_to_metric_families(r.read().decode()))


def merge(per_process: dict[int, list[Metric] | None]) -> list[Metric]:
    """The families of every process, samples labelled with the process index; a family
    keeps the first process's type and help. None: a process that did not answer."""
    merged: dict[str, Metric] = {}
    up = GaugeMetricFamily("boundless_serving_process_up", "whether a serving process answered this scrape", labels=["process"])
    for index, families in sorted(per_process.items()):
        up.add_metric([str(index)], 0.0 if families is None else 1.0)
        for family in families or []:
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            into.samples += [
                Sample(s.name, {**s.labels, "process": str(index)}, s.value, s.timestamp, s.exemplar) for s in family.samples
            ]
    return [up, *merged.values()]


class MergedCollector:
    """A prometheus_client collector over `endpoints()`: process index -> metrics URL."""

    def __init__(self, endpoints: Callable[[], dict[int, str]]) -> None:
        self.endpoints = endpoints

    def collect(self) -> Iterator[Metric]:
        per: dict[int, list[Metric] | None] = {}
        for index, url in self.endpoints().items():
            try:
                per[index] = scrape(url)
            except (OSError, ValueError):
                per[index] = None
        yield from merge(per)


def serve_merged(host: str, port: int, endpoints: Callable[[], dict[int, str]]) -> int:
    """Starts the merged endpoint; returns its bound port (-1 disables it, as for every daemon)."""
    if port < 0:
        return -1
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MergedCollector(endpoints))  # type: ignore[arg-type]
    server, _ = start_http_server(port, addr=host, registry=registry)
    return int(server.server_port)
