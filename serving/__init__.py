"""The prediction service.

    client/   the Python client library and `boundless predict` (no torch, no numba scoring)
    request/  the compact request encoding, both sides of it
    loading/  versions from the repository to servable models: copies, images, deltas, swaps
    scoring/  the scoring kernels, the threads that run them, the MLP on CPU or CUDA
    sharded/  the router and the serving shards behind it

Imports ctr and protos; never modelmgr."""

from ctr.runtime.kernel_cache import install as _install_kernel_cache

_install_kernel_cache()  # before any module of this package defines a numba kernel
