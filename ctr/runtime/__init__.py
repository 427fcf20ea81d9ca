"""Process plumbing every daemon shares: the typed config loader (defaults, YAML,
BOUNDLESS_* variables, flags), the gRPC server with health and reflection, TLS and bearer
tokens, and the stamps of numba's kernel cache. Imports no other ctr package."""
