"""What a shard refuses; the servicer maps these to gRPC status codes."""


class ShardError(ValueError):
    """A request this shard cannot serve as asked (unknown table, misrouted keys...)."""


class SessionExpired(ShardError):
    """A push named a pull session this shard no longer remembers."""


class RowsMoved(ShardError):
    """A push named rows by ids of a layout the table no longer has (a delete moved rows)."""


class StaleGeneration(ShardError):
    """A push from a trainer generation older than the one that last restored this shard."""


class BaseMismatch(ShardError):
    """A state difference whose base is not what this shard's range holds."""
