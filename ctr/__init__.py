"""Shared domain core: feature hashing, sample formats, hashmap kernels, model math and files."""
