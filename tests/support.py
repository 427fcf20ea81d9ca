"""Waits shared by the tests: a condition polled until it holds, or an error that says what
did not happen, with the end of the log of a process that died meanwhile."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from boundless.processes import log_tail


def wait_until(
    what: str,
    predicate: Callable[[], bool],
    timeout: float = 60.0,
    alive: Iterable[Any] = (),
    retry_on: tuple[type[BaseException], ...] = (),
    every_s: float = 0.05,
) -> float:
    """Polls predicate() until it is true and returns the seconds that took; raises
    AssertionError naming `what` after `timeout` s. Each `alive` item (a Daemon with check(),
    or a Popen) must keep running meanwhile; exceptions in `retry_on` count as not yet."""
    start = time.monotonic()
    watched = list(alive)
    while True:
        try:
            if predicate():
                return time.monotonic() - start
        except retry_on:
            pass
        for item in watched:
            if isinstance(item, subprocess.Popen):
                assert item.poll() is None, f"{what}: the process exited with {item.returncode}"
            else:
                item.check()
        if time.monotonic() - start > timeout:
            logs = [f"--- {item.name}:\n{log_tail(item.log)}" for item in watched if hasattr(item, "log")]
            raise AssertionError("\n".join([f"{what}: not within {timeout} s", *logs]))
        time.sleep(every_s)


def wait_for_text(log: Path, text: str, proc: subprocess.Popen[str], timeout: float = 60.0) -> None:
    """Waits until `text` appears in the log file of a running process."""
    start = time.monotonic()
    while text not in log.read_text():
        assert proc.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() - start < timeout, f"no {text!r} within {timeout} s: {log.read_text()[-3000:]}"
        time.sleep(0.05)


def two_fm_versions(root: Path, reqs: list[Any], keys: int) -> tuple[Any, dict[int, list[Any]]]:
    """Versions 1 and 2 of an FM model (k 4) holding the requests' keys, with other weights
    each, published in a repository at `root`; returns the repository and each version's
    scores of each request, as serving should answer them."""
    import numpy as np

    from bench.serving_model import publish, spec_for
    from ctr.repository.versions import Repository
    from modelmgr.publish.evaluate import load_published
    from serving.request.encoding import decode, field_hash_ids

    spec = spec_for("fm", k=4, hidden=())
    repo = Repository(root, "ctr")
    for v in (1, 2):
        publish(repo, v, spec, reqs, keys=keys, shards=2, seed=v)
    hashes = field_hash_ids(tuple(spec.fields))
    expected = {v: [load_published(repo, v).score(decode(r, spec.field_count, hashes)) for r in reqs] for v in (1, 2)}
    assert not np.allclose(expected[1][0], expected[2][0], atol=1e-3)  # the versions tell apart
    return repo, expected
