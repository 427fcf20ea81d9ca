"""Where the MLP of wdl and deepfm trains (`--device`): cpu, cuda, or auto, which times one
training step of this MLP at this batch size on each and takes the faster. A small MLP at a
small batch loses more to the copies and the kernel launches than the GPU gains: auto
measures it instead of guessing. Importing this module imports torch."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping

import torch

from ctr.model.mlp import DeepCTR
from ctr.model.spec import ModelSpec

log = logging.getLogger("trainer")
DEVICES = ("auto", "cpu", "cuda")


def cuda_available() -> bool:
    return torch.cuda.is_available()


def step_seconds(spec: ModelSpec, batch: int, device: torch.device, reps: int = 5) -> float:
    """Median time of one MLP step as the trainer runs it: the pooled input copied in, a
    forward, one backward, the output and the input gradient copied out."""
    net = DeepCTR(spec).to(device)
    pooled = torch.randn(batch, spec.field_count, spec.k).pin_memory() if device.type == "cuda" else None
    times = []
    for i in range(reps + 1):
        x = pooled if pooled is not None else torch.randn(batch, spec.field_count, spec.k)
        started = time.perf_counter()
        inp = x.to(device, non_blocking=True).requires_grad_(True)
        out = net(inp)
        out.sum().backward()  # as the trainer's step: no gradient tensor, so no symbolic-shapes import
        out.detach().cpu(), inp.grad.cpu()  # type: ignore[union-attr]
        if i:  # the first step compiles and allocates
            times.append(time.perf_counter() - started)
    times.sort()
    return times[len(times) // 2]


def local_rank(environ: Mapping[str, str] = os.environ) -> int:
    """This rank's index among the ranks on its host: torchrun's LOCAL_RANK (the --workers
    ranks set it too), else 0, as for a pod that runs one rank on its own GPUs."""
    try:
        return max(0, int(environ.get("LOCAL_RANK", "0")))
    except ValueError:
        return 0


def choose(wanted: str, spec: ModelSpec, batch: int, local: int = 0) -> torch.device:
    """The device the MLP trains on: a GPU is the host's `local`-th (round robin), so the
    ranks of one host spread over its GPUs. ValueError names --device when it cannot be had."""
    if wanted not in DEVICES:
        raise ValueError(f"--device {wanted!r}: expected one of {', '.join(DEVICES)}")
    if wanted == "cpu" or (wanted == "auto" and not cuda_available()):
        return torch.device("cpu")
    if not cuda_available():
        raise ValueError("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
    gpu = torch.device("cuda", local % torch.cuda.device_count())
    torch.cuda.set_device(gpu)  # NCCL and the allocator work on the current device
    if wanted == "cuda":
        return gpu
    on_gpu, on_cpu = step_seconds(spec, batch, gpu), step_seconds(spec, batch, torch.device("cpu"))
    chosen = gpu if on_gpu < on_cpu else torch.device("cpu")
    log.info(
        "--device auto: an MLP step of %d examples takes %.2f ms on cuda, %.2f ms on cpu: %s",
        batch,
        1e3 * on_gpu,
        1e3 * on_cpu,
        chosen.type,
    )
    return chosen
