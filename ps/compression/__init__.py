"""Compressed pushes: stateful per-table compressors on the worker (compressor.py), the
self-describing payload they produce (payload.py) and the numba kernels behind the codecs
(bits.py, minifloat.py, quantize.py, topk.py), each with a plain reference (reference.py)."""
