"""Scoring: the numba kernels of each family, the threads that split a request over
them, and the MLP of the DNN families (CPU, CUDA, dynamic batching). Imports ctr only."""
