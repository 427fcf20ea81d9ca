"""Samples to hashed CSR batches: feature hashing, the schema and its fields, the line
formats, unique keys, and the quality metrics (AUC, logloss). Imports numpy and numba only."""
