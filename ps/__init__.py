"""The sharded parameter server. `ps.api` states the contract and holds its shared types and
errors; `ps.client` is what a trainer uses; `ps.server` is the shard daemon; `ps.compression`
the codecs both sides use; `ps.wire` packs keys and rows into bytes. Importing the client loads
no server module (the in-process shards of `--ps local` load when asked for)."""

from ctr.runtime.kernel_cache import install as _install_kernel_cache

_install_kernel_cache()  # before any module of this package defines a numba kernel
