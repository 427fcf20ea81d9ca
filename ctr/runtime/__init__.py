"""Process plumbing every daemon shares: the typed config loader (defaults, YAML,
BOUNDLESS_* variables, flags), the gRPC server with health and reflection, TLS and bearer
tokens. Imports no other ctr package."""
