"""What the trainer offers the packages above it (boundless.api): its one config type and a
training run as a call that returns its summary."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from trainer.config import TrainerConfig
from trainer.openmp import bound_openmp_spin

__all__ = ["TrainerConfig", "run_training"]


def run_training(
    conf: TrainerConfig, stop: threading.Event, on_progress: Callable[[dict[str, float]], None] | None = None
) -> dict[str, Any]:
    """`boundless train` with this config, in this process, to a finite source's end or
    until `stop` is set: the summary --metrics-out writes. on_progress gets each progress
    record. Raises ConfigError or BadInput as the command exits on them."""
    bound_openmp_spin()  # before torch loads, if it has not (trainer.openmp)
    from trainer.daemon import check_codecs, train_run  # the run's machinery loads when a run starts

    check_codecs(conf)
    return train_run(conf, stop, logging.getLogger("trainer"), on_progress=on_progress, announce=False)
