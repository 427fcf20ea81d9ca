"""The PS contract, stated once; the client, the transports and the shards all build on it.

Keys are uint64 feature hashes. Every call that takes keys takes them sorted and unique
(`np.unique` order); rows come back in the order of the keys. A call blocks until every
shard it names has answered. `PSClient` and both transports are safe to call from several
threads at once (the trainer's pipeline pulls batch i+1 while batch i pushes); a pull
session (what a pull leaves for the matching push) belongs to one thread.

A push carries GRADIENT rows (the shard steps the table's optimizer once per row), DELTA
rows (the shard adds an optimizer-state change), for dense Adam MOMENTUM (a step with the
worker's momentum over the frozen variance) or, for dense tables, STATE rows (the shard's
range becomes them: a worker that trains the table itself writes it so, and a resent write
changes nothing), or STATE_DIFF (the same state as its difference from a base the shard must
hold: ps.compression.state_diff). A push that cannot be applied changes nothing.

Errors a caller handles: SessionLost (resend the keys), ShardRestarted (every shard goes back
to a common checkpoint cut), StoppedWhileUnreachable (stop; the next start takes up from the
last cut), ModelMismatch (the shards hold another model), BaseChanged (a STATE_DIFF's base is
not what the shard holds: send the state whole)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ctr.model.spec import TableSpec

Rows = npt.NDArray[Any]  # float32 weights or gradients, float64 optimizer state or deltas

GRADIENT = "gradient"
DELTA = "delta"
MOMENTUM = "momentum"  # dense Adam: a step with the worker's momentum over the frozen variance
STATE = "state"  # dense tables: the optimizer state itself, replacing the shard's
STATE_DIFF = "state_diff"  # dense tables: the state as its difference from the base the shard holds


@dataclass(frozen=True)
class Lifecycle:
    """What a shard does with the rows of its sparse tables: admission and eviction (ps.server.lifecycle)."""

    admit_after: int = 1  # 1: every key gets a row at once
    bloom_counters: int = 1 << 24  # counters (bytes) of each table's counting Bloom filter
    ttl_s: float = 0.0  # 0: no time to live
    ttl_updates: int = 0
    max_rows: int = 0  # 0: no cap
    sweep_every_s: float = 1.0  # time-to-live sweeps run this often per table (update TTLs: every quarter of it)

    @property
    def evicts(self) -> bool:
        return self.ttl_s > 0 or self.ttl_updates > 0 or self.max_rows > 0


@dataclass(frozen=True)
class ExportedFile:
    name: str
    table: str
    role: str
    size: int
    sha256: str
    rows: int
    columns: str = ""  # "table:dim,..." of a combined sparse file, in row order
    shard: int | None = None  # the shard that wrote it (readers order shard files by this)


@dataclass(frozen=True)
class TableStats:
    name: str
    kind: str
    rows: int
    capacity: int
    dim: int
    memory_bytes: int
    digest: int = 0  # ps.server.digest of the table's rows on this shard
    samples: int = 0  # samples whose pushes this shard applied to the table
    not_admitted: int = 0  # pushed rows dropped: their keys were not seen often enough yet
    evicted: int = 0  # rows evicted (TTL, row cap)


@dataclass(frozen=True)
class KnownRows:
    """What a client that keeps rows sends besides the keys it does not hold: its writer id,
    and the row ids (sorted) of the rows it knows on a shard, valid for `layout`; `stale`
    (over `ids`, None: none) marks those whose copy it no longer holds, which travel
    whoever wrote them last."""

    client: int
    layout: int
    ids: npt.NDArray[np.int64]
    stale: npt.NDArray[np.bool_] | None = None


@dataclass(frozen=True)
class CachedPull:
    """A shard's reply to a pull with KnownRows (docs/design/pull-cache.md). `stale`: the
    table's layout changed, nothing else is set. Otherwise, of the keys sent: which the
    shard stores (`stored`), their row ids and state rows; of the known ids: which another
    writer changed (`changed`) and their state rows."""

    session_id: int
    stale: bool
    layout: int
    stored: npt.NDArray[np.bool_]
    stored_ids: npt.NDArray[np.int64]
    stored_rows: npt.NDArray[np.float64]
    changed: npt.NDArray[np.bool_]
    changed_rows: npt.NDArray[np.float64]


@dataclass(frozen=True)
class PushAck:
    """What a push by a client that keeps rows learns (docs/design/pull-cache.md):
    `conflicts`, per key named, where its copy is no longer the row; `new_ids`, for the
    keys its pull sent as keys and that do not conflict (in key order), their row ids (-1:
    no row), valid for `layout`."""

    conflicts: npt.NDArray[np.bool_]
    new_ids: npt.NDArray[np.int64]
    layout: int
    epoch: int = 0  # the table's epoch after the push: the copies it leaves are the rows at it
    lease_s: float = 0.0  # a write lease granted with the reply (docs/design/write-leases.md)


@dataclass(frozen=True)
class NamedIds:
    """The row ids (sorted, unique) of a push's keys on its shard, valid for `layout`: a
    remote transport sends them in place of the keys (docs/design/pull-cache.md)."""

    ids: npt.NDArray[np.int64]
    layout: int


@dataclass(frozen=True)
class SparsePush:
    """One shard's part of a sparse push, as every transport takes it: the one place the
    push's fields are written.

    keys: those the named pull `sessions` hold (one session's, or the union of several
    workers' when a host's leader summed their pushes; the payload may carry a subset of
    them), or, with no session, the keys the payload's rows belong to, which then travel.
    payload: rows in a value codec (ps.compression.payload). samples: of the batches whose
    updates the push carries (counted per table). client: the writer id of a client that
    keeps rows (docs/design/pull-cache.md), which then gets a PushAck; 0: none.
    decoded: (subset, values), what the payload decodes to, when the encoder kept it: a
    transport in this process takes it instead of decoding the bytes (an FFM row's state
    is 5 KB); a remote one sends the payload alone. ids: with no session, the keys' row
    ids on the shard, sent instead of the keys; a shard whose rows moved refuses them
    (SessionLost) and the caller sends the keys."""

    shard: int
    table: str
    keys: npt.NDArray[np.uint64]
    sessions: tuple[int, ...]
    payload: bytes
    kind: str
    samples: int = 0
    client: int = 0
    decoded: tuple[npt.NDArray[np.int64] | None, npt.NDArray[np.float64]] | None = None
    ids: NamedIds | None = None


@dataclass(frozen=True)
class DensePush:
    """One shard's range of a dense push: a GRADIENT, MOMENTUM (standing for `steps` steps),
    DELTA or STATE in a value codec; or a STATE_DIFF body against the base of `base_digest`."""

    shard: int
    table: str
    payload: bytes
    kind: str
    steps: int = 1
    samples: int = 0
    base_digest: int = 0


class SessionLost(RuntimeError):
    """The shard forgot a pull session, or its rows moved since the row ids a push named;
    the caller resends the keys."""


class BaseChanged(RuntimeError):
    """A shard refused a STATE_DIFF write: it does not hold the base the difference was taken
    from (a restart, a restore, a write that failed part way); the writer sends the state whole."""


class ShardRestarted(RuntimeError):
    """A shard answered with a new incarnation: it restarted from its committed cut, so every
    shard must go back to a common cut (trainer/run/recovery.py)."""

    def __init__(self, shard: int, why: str = "") -> None:
        super().__init__(
            why or f"PS shard {shard} restarted (a new incarnation): it lost what was pushed since its committed cut"
        )
        self.shard = shard


class StoppedWhileUnreachable(RuntimeError):
    """The caller was asked to stop (SIGTERM) while a shard could not be reached: its calls
    stop retrying, and the next start takes up from the last checkpoint cut."""


class Superseded(ValueError):
    """A shard follows a newer trainer generation than this trainer's: another trainer
    restored the shards after this one did, and the shard refuses this one's calls. Two
    trainers (not ranks of one group) on one PS: the older one stops, naming why, instead of
    fighting the newer one for the shards."""


# the shard that keeps a checkpoint cut's trainer offsets (the others keep an empty blob)
OFFSETS_SHARD = 0


@dataclass(frozen=True)
class ShardStatus:
    index: int
    count: int
    update_seq: int
    checkpoint_seq: int
    checkpoint_offsets: bytes  # the committed cut's trainer offsets, on OFFSETS_SHARD
    tables: list[TableStats]
    incarnation: int = 0
    generation: int = 0
    committed_cut: int = 0
    cuts: tuple[int, ...] = ()
    drops_rows: bool = False  # admission or eviction is on: a push may not land on every row it names
    export_root: str = ""  # where the shard writes exports ("": none)
    durable: bool = False  # a data directory holds its checkpoint cuts (none: memory only)


# Which model a PS holds: its name, type and (for models whose tables are sized by the
# field list: ffm, wdl, deepfm) a digest of its fields; and, from its tables, their layout
# (kind, width and optimizer kind: --k, --hidden, --opt-*'s kind). A shard records the
# identity of the first trainer that restores it, keeps it in its store, and refuses a
# trainer that declares another model or another layout; `boundless train --replace-model`
# starts over explicitly. Other optimizer settings of one kind (a rate, l1) are not part of
# it: a trainer may change them between runs, and the shards take them up (ps.server.shard).


class ModelMismatch(ValueError):
    """A trainer declared a model other than the one this shard holds."""


def layout_of(specs: Iterable[TableSpec]) -> str:
    """Each table's layout, 'name=kind:dim:optimizer' by name: what its stored rows mean."""
    return ",".join(sorted(f"{s.name}={s.kind}:{s.dim}:{s.optimizer.kind}" for s in specs))


def _layouts(layout: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in layout.split(",") if "=" in item)


def layout_differences(held: str, declared: str) -> list[str]:
    """The tables both layouts name and lay out differently, as 'table T: K dim D (O) held,
    K dim D (O) declared'."""
    a, b = _layouts(held), _layouts(declared)
    out = []
    for name in sorted(a.keys() & b.keys()):
        if a[name] != b[name]:
            out.append(f"table {name}: {_table_text(a[name])} held, {_table_text(b[name])} declared")
    return out


def _table_text(item: str) -> str:
    kind, dim, optimizer = (item.split(":") + ["", ""])[:3]
    return f"{kind} dim {dim} ({optimizer})"


@dataclass(frozen=True)
class ModelIdentity:
    name: str
    type: str
    fields_sha256: str = ""  # "" where the field list does not size the tables, or is not known yet
    fields: int = 0
    layout: str = ""  # layout_of(the tables); "" where not known

    @classmethod
    def of(
        cls,
        name: str,
        type_: str,
        fields: tuple[str, ...] = (),
        sized_by_fields: bool = False,
        tables: Iterable[TableSpec] = (),
    ) -> ModelIdentity:
        layout = layout_of(tables)
        if not sized_by_fields or not fields:
            return cls(name, type_, layout=layout)
        digest = hashlib.sha256("\n".join(fields).encode()).hexdigest()
        return cls(name, type_, digest, len(fields), layout)

    def describe(self) -> str:
        shape = f", {self.fields} fields {self.fields_sha256[:12]}" if self.fields_sha256 else ""
        return f"{self.name!r} ({self.type}{shape})"

    def conflict(self, other: ModelIdentity) -> bool:
        """Another model: another name or type, another field list where both know it, or a
        table both name laid out otherwise."""
        if (self.name, self.type) != (other.name, other.type):
            return True
        if self.fields_sha256 and other.fields_sha256 and self.fields_sha256 != other.fields_sha256:
            return True
        return bool(layout_differences(self.layout, other.layout))

    def merged(self, other: ModelIdentity) -> ModelIdentity:
        """This identity, with other's field digest where this one has none yet."""
        if self.fields_sha256 or not other.fields_sha256:
            return self
        return replace(self, fields_sha256=other.fields_sha256, fields=other.fields)

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ModelIdentity:
        d: dict[str, Any] = json.loads(raw)
        return cls(
            str(d["name"]), str(d["type"]), str(d.get("fields_sha256", "")), int(d.get("fields", 0)), str(d.get("layout", ""))
        )


@dataclass(frozen=True)
class Declared:
    """A shard's answer to a declaration: per table, whether it starts empty; and the
    tables it held with other optimizer settings, now the declared ones (settings_change)."""

    created: list[bool]
    retuned: list[str]


def settings_change(held: TableSpec, declared: TableSpec) -> str:
    """'' when `declared` steps a table as `held` does; else 'w: ftrl l1 0.1 -> 30, ...'."""
    changes = [
        f"{name} {getattr(held.optimizer, name):g} -> {getattr(declared.optimizer, name):g}"
        for name in (f.name for f in dataclasses.fields(held.optimizer) if f.name != "kind")
        if getattr(held.optimizer, name) != getattr(declared.optimizer, name)
    ]
    if held.update != declared.update:
        changes.append(f"update {held.update} -> {declared.update}")
    return f"{declared.name}: {declared.optimizer.kind} {', '.join(changes)}" if changes else ""


def mismatch(held: ModelIdentity, declared: ModelIdentity, shard: int) -> ModelMismatch:
    same_model = not replace(held, layout="").conflict(replace(declared, layout=""))
    if same_model:
        what = (
            f"PS shard {shard} holds {f'model {held.describe()}' if held.name else 'a model'} with other tables than this"
            " trainer declares: "
            + "; ".join(layout_differences(held.layout, declared.layout))
            + " (another --k, --hidden or optimizer kind than the model was trained with)."
            " Train it with the settings it was trained with, give the new model PS shards of its own,"
        )
    else:
        what = (
            f"PS shard {shard} holds model {held.describe()}; this trainer declares {declared.describe()}."
            " Give the new model PS shards of its own,"
        )
    return ModelMismatch(what + " or start the trainer with --replace-model to drop the model they hold")
