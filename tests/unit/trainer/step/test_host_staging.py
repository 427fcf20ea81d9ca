"""The MLP's host copies: on the CPU the arrays pass through untouched; on a GPU they go
through page-locked buffers reused from step to step, and what comes back is the caller's."""

import numpy as np
import pytest
import torch

from trainer.step.host_staging import HostStaging

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_on_the_cpu_arrays_pass_through_without_a_copy():
    stage = HostStaging(torch.device("cpu"))
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = stage.to_device("a", a)
    assert t.data_ptr() == a.ctypes.data
    back = stage.to_host({"t": t * 2})
    np.testing.assert_array_equal(back["t"], a * 2)


@cuda
def test_on_a_gpu_copies_go_through_reused_page_locked_buffers():
    gpu = torch.device("cuda")
    stage = HostStaging(gpu)
    rng = np.random.default_rng(0)
    results = []
    for rows in (64, 64, 256, 32):  # the same size again, a larger one (the buffer grows), a smaller one
        a = rng.random((rows, 5, 3), dtype=np.float32)
        t = stage.to_device("pooled", a)
        assert t.device.type == "cuda" and stage._up["pooled"].is_pinned()
        back = stage.to_host({"out": t.sum(dim=(1, 2)), "same": t})
        assert stage._down["same"].is_pinned()
        np.testing.assert_allclose(back["out"], a.sum(axis=(1, 2)), rtol=1e-5)
        np.testing.assert_array_equal(back["same"], a)
        results.append((a, back["same"]))
    for a, same in results:  # later steps reused the buffers; the arrays handed back are untouched
        np.testing.assert_array_equal(same, a)
