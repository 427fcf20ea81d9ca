"""The PS shard daemon: the shard (tables, pull sessions, pushes) and its parts (checkpoint
cuts, export, row lifecycle) with its RocksDB store, its gRPC servicer, and the in-process
transport of `--ps local`. Imports ctr, ps.api, ps.wire and ps.compression; never ps.client
(except the transport seam types)."""
