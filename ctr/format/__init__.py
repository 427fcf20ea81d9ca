"""Bytes on disk and on the wire: model files (full hashmap images, deltas, dense arrays),
the key->row maps they hold (the compact hashmap, the bucketized cuckoo map and its Bloom
filter), LEB128 varints, and the CPU intrinsics their kernels use. May import ctr.data."""
