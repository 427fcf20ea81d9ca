"""--device: cpu, cuda (refused without one), and auto, which times a step on each."""

from __future__ import annotations

import pytest
import torch

from ctr.model.spec import ModelSpec
from trainer.step.device import choose, cuda_available, step_seconds
from trainer.step.factorization import build_model

SPEC = ModelSpec("deepfm", k=4, fields=("a", "b", "c"), hidden=(32, 16))


def test_cpu_is_cpu_and_auto_without_a_gpu_is_cpu():
    assert choose("cpu", SPEC, 256).type == "cpu"
    if not cuda_available():
        assert choose("auto", SPEC, 256).type == "cpu"
    with pytest.raises(ValueError, match="--device 'tpu'"):
        choose("tpu", SPEC, 256)


@pytest.mark.skipif(cuda_available(), reason="a CUDA device is present")
def test_cuda_without_a_gpu_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--device cuda: torch sees no CUDA device"):
        choose("cuda", SPEC, 256)


def test_a_step_is_timed_and_lr_refuses_a_gpu():
    assert 0 < step_seconds(SPEC, 64, torch.device("cpu"), reps=2) < 10
    assert build_model(ModelSpec("lr")).device == "cpu"
    with pytest.raises(ValueError, match="--device cuda: lr trains with numba kernels on the CPU"):
        build_model(ModelSpec("lr"), device="cuda")


@pytest.mark.skipif(not cuda_available(), reason="needs a CUDA device")
def test_auto_on_a_gpu_machine_picks_the_faster_and_the_model_trains_there():
    big = ModelSpec("deepfm", k=16, fields=tuple("abcdefghij"), hidden=(400, 400, 400))
    gpu, cpu = step_seconds(big, 4096, torch.device("cuda")), step_seconds(big, 4096, torch.device("cpu"))
    assert choose("auto", big, 4096).type == ("cuda" if gpu < cpu else "cpu")
    assert build_model(big, device="cuda").device == "cuda"
