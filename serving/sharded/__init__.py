"""Sharded serving: the router that splits a request by shard, fans it out with a deadline
and hedging, and sums the parts; and the ShardScorer servicer of each serving shard."""
