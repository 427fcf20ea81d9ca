"""Prometheus metrics of a PS shard."""

from prometheus_client import Counter, Gauge, Histogram

RPC_SECONDS = Histogram("boundless_ps_rpc_seconds", "PS RPC latency", ["method"])
RPC_ERRORS = Counter("boundless_ps_rpc_errors_total", "PS RPCs that failed", ["method", "code"])
KEYS = Counter("boundless_ps_keys_total", "keys pulled or pushed", ["method", "table"])
PUSH_BYTES = Counter("boundless_ps_push_payload_bytes_total", "push payload bytes", ["codec"])
WIRE_BYTES = Counter(
    "boundless_ps_wire_bytes_total", "serialized bytes of ParameterServer calls answered", ["method", "direction"]
)
ROWS = Gauge("boundless_ps_rows", "rows held", ["table"])
UPDATE_SEQ = Gauge("boundless_ps_update_seq", "update sequence number")
LEASES_GRANTED = Counter(
    "boundless_ps_write_leases_granted_total", "write leases granted or renewed (docs/design/write-leases.md)", ["table"]
)
LEASE_WAIT_SECONDS = Counter(
    "boundless_ps_write_lease_wait_seconds_total", "seconds pushes waited for another client's write lease", ["table"]
)
