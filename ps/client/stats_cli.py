"""`boundless ps stats ADDRESS[,ADDRESS...] [--json]`: each shard's tables with their row
counts, content digests and samples applied, and per table the digest of the whole model
(the shards' digests add up, ps/server/digest.py), so two deployments can be compared exactly."""

from __future__ import annotations

import sys
from typing import Any

import grpc

from ctr.runtime import strict_json
from ps.client.grpc_transport import GrpcTransport
from ps.server.digest import combine
from ps.transport import ShardStatus


def collect(addresses: list[str], timeout: float = 10.0) -> dict[str, Any]:
    transport = GrpcTransport(addresses, timeout=timeout)
    try:
        statuses: list[ShardStatus] = []
        for i, address in enumerate(addresses):
            try:
                statuses.append(transport.status(i))
            except grpc.RpcError as e:
                raise OSError(f"shard {address}: {e.code().name} ({e.details()})") from None
    finally:
        transport.close()
    shards = [
        {
            "address": address,
            "shard_index": s.index,
            "shard_count": s.count,
            "update_seq": s.update_seq,
            "checkpoint_seq": s.checkpoint_seq,
            "tables": [
                {
                    "name": t.name,
                    "kind": t.kind,
                    "rows": t.rows,
                    "digest": f"{t.digest:016x}",
                    "samples": t.samples,
                    "not_admitted": t.not_admitted,
                    "evicted": t.evicted,
                    "memory_bytes": t.memory_bytes,
                }
                for t in s.tables
            ],
        }
        for address, s in zip(addresses, statuses, strict=True)
    ]
    tables: dict[str, dict[str, Any]] = {}
    for s in statuses:
        for t in s.tables:
            entry = tables.setdefault(t.name, {"kind": t.kind, "rows": 0, "digests": [], "samples": []})
            entry["rows"] += t.rows
            entry["digests"].append(t.digest)
            entry["samples"].append(t.samples)
    model = {
        name: {"kind": e["kind"], "rows": e["rows"], "digest": f"{combine(e['digests']):016x}", "samples": e["samples"]}
        for name, e in tables.items()
    }
    return {"shards": shards, "tables": model}


def show(addresses_text: str, as_json: bool) -> int:
    addresses = [a.strip() for a in addresses_text.split(",") if a.strip()]
    if not addresses:
        raise ValueError("ps stats: give the shards' addresses, HOST:PORT[,HOST:PORT...]")
    stats = collect(addresses)
    if as_json:
        sys.stdout.write(strict_json.dumps(stats, indent=1))
        print()
        return 0
    for s in stats["shards"]:
        print(
            f"shard {s['shard_index']}/{s['shard_count']} at {s['address']}: update seq {s['update_seq']},"
            f" checkpoint seq {s['checkpoint_seq']}"
        )
        for t in s["tables"]:
            line = f"  {t['name']:<12} {t['kind']:<6} rows {t['rows']:>12,}  digest {t['digest']}  samples {t['samples']:,}"
            if t["not_admitted"] or t["evicted"]:
                line += f"  not admitted {t['not_admitted']:,}  evicted {t['evicted']:,}"
            print(line)
    print("model (all shards):")
    for name, t in stats["tables"].items():
        samples = "/".join(f"{n:,}" for n in t["samples"])
        print(f"  {name:<12} {t['kind']:<6} rows {t['rows']:>12,}  digest {t['digest']}  samples per shard {samples}")
    return 0
