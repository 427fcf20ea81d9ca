"""The PS client library: splits keys by shard, calls the shards in parallel through a
transport (gRPC, or in-process shards), compresses pushes and aggregates a host's pushes.
Imports ctr, ps.api, ps.wire and ps.compression; ps.server only lazily, for `--ps local`."""

from ps.client.ps_client import DEFAULT_RESIDUAL_ROWS, PSClient, PullSession, load_wire_kernels

__all__ = ["DEFAULT_RESIDUAL_ROWS", "PSClient", "PullSession", "load_wire_kernels"]
