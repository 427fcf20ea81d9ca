"""The model manager: verifies exports, gates them on quality, publishes versions, keeps the
policy, rolls back. Imports ctr, protos, and serving's loading and request packages (the gate
scores a candidate as serving would).

    publish/   from export to version: verify, evaluate, gate, publish or reject, compact
    commands/  the version commands a person runs (pin, rollback, gc, show, diff, eval)
"""

from ctr.runtime.kernel_cache import install as _install_kernel_cache

_install_kernel_cache()  # before any module of this package defines a numba kernel
