"""The shared layer: what two or more daemons use. It imports nothing of ps, trainer,
serving, modelmgr or boundless.

    data/        features to hashed CSR batches: hashing, schema, fields, line formats, quality
    format/      bytes on disk and on the wire: model files and their key maps, varints
    model/       model families: specs, optimizers, the training and scoring math, the registry
    repository/  the repository contract: manifests and export files, holdouts, storage
    runtime/     process plumbing of every daemon: typed config, gRPC server, TLS, tokens, kernel cache
    routing.py   which shard owns a key
"""

from ctr.runtime.kernel_cache import install as _install_kernel_cache

_install_kernel_cache()  # before any module of this package defines a numba kernel
