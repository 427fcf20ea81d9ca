"""The streaming trainer daemon: reads samples, trains through the PS client, asks for exports.
It reaches the PS only through `ps.api` and `ps.client`.

    input/  sources (file, folder, stdin, Kafka) to parsed batches
    step/   one batch through a model: pull, train, push (the per-family trainer side)
    run/    the loop around the steps: exports, checkpoint cuts, recovery, worker processes
"""

from ctr.runtime.kernel_cache import install as _install_kernel_cache

_install_kernel_cache()  # before any module of this package defines a numba kernel
