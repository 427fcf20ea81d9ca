"""Sharded parameter server: shard daemon, optimizers on the shards, and the client library."""
