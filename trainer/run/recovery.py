"""Exactly-once training across crashes (docs/exactly-once.md): what a checkpoint cut
records for the trainer, which cut to go back to, and going back there.

A cut's stream offsets (opaque to the shards) hold the trainer's position after the last
batch whose pushes every shard acknowledged, the samples trained so far and the progressive
metrics, so a trainer that goes back to a cut also takes up its metrics from there."""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import zstandard

from ctr.format.zstd_local import compressor, decompressor
from ctr.runtime import config as cfg
from ps.api import OFFSETS_SHARD, ShardRestarted, ShardStatus
from ps.client import PSClient
from trainer.input import rescaled
from trainer.input.source import Position
from trainer.json_arrays import array_text, text_array
from trainer.run.rendezvous import share
from trainer.step.progressive import ProgressiveMetrics

log = logging.getLogger("trainer")
# a cut's offsets are zstd'd JSON (the predictions' base64 shrinks by about a quarter);
# cuts written before 2026-12-02 hold the JSON as it is, and read too
MAX_OFFSETS_BYTES = 1 << 30


@dataclass(frozen=True)
class CutPoint:
    """Where training takes up after a restore; with several workers, each one's in `parts`."""

    cut: int  # 0: empty tables, the start of the stream
    position: Position | None = None
    samples: int = 0
    progress: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)  # TrainableModel.state at the cut
    parts: tuple[CutPoint, ...] = ()
    # False where no shard had committed the cut when it was read (every shard prepared it,
    # the trainer stopped before the commit): its positions are known after the restore
    offsets_known: bool = True
    at: float = 0.0  # the cut's wall time (0: not recorded, cuts before 2026-12-05)

    @property
    def ranks(self) -> int:
        """How many ranks took the cut."""
        return len(self.parts) or 1


def check_ranks(point: CutPoint, world: int) -> None:
    """A cut's positions are per rank: a group of another size takes up from it where they
    map to its ranks (rank_part): a topic's partition offsets, a folder's or an S3 prefix's
    positions. Positions missing, or some in a topic and some in files, do not."""
    if point.cut and point.offsets_known and point.ranks != world and not (_in_a_topic(point) or _in_files(point)):
        raise cfg.ConfigError(
            f"checkpoint cut {point.cut} was taken with {point.ranks} rank(s), whose positions in its stream do not map"
            f" to {world}: run with --workers {point.ranks} (or --world-size {point.ranks}), or start over with"
            " --from-start (a Kafka topic's, a folder's and an S3 prefix's positions do map)"
        )


def _in_a_topic(point: CutPoint) -> bool:
    parts = point.parts or (point,)
    return all(p.position is not None and p.position.partitions is not None for p in parts)


def _in_files(point: CutPoint) -> bool:
    """Every rank's position is in a folder's file or a prefix's object (or none read yet):
    rescaled.prior_of maps them."""
    parts = point.parts or (point,)
    return all(p.position is not None and p.position.partitions is None for p in parts)


def sample_limit(limit: int, point: CutPoint, rank: int, world: int) -> int | None:
    """Where rank `rank` of `world` stops under `--max-samples limit` (0: no limit; None
    back), counted as its trainer counts, from the samples the cut hands it. Each rank its
    share of the limit where the cut's ranks are these (each carries its own samples);
    after a cut taken by another number, what the cut left of the limit, dealt out anew on
    top of what the rank carries (rank 0 carries all: rank_part). Before, rank 0 stopped at
    its share of the whole limit, which the samples it carried could pass at once, and the
    others trained their shares anyway: more than the limit in all."""
    if limit <= 0:
        return None
    if point.ranks == world or not point.cut or not point.offsets_known:
        return share(limit, rank, world)
    taken = sum(p.samples for p in point.parts or (point,))
    return (taken if rank == 0 else 0) + share(max(0, limit - taken), rank, world)


def rank_part(point: CutPoint, rank: int, world: int, say: bool = True) -> CutPoint:
    """Where rank `rank` of `world` takes up: its part of a cut the ranks took together, or
    the cut itself when one process took it. A cut taken by another number of ranks (a
    trainer scaled out or in) is mapped. A topic's: partition p was read by rank p % W of the
    W that took it, so its offset is that rank's, and every rank now gets every partition's
    offset (a KafkaSource reads its own, p % world == rank). A folder's or a prefix's: every
    rank gets the W positions as its position's prior, which say for each file of its new
    share whether it was read, in part or whole (trainer.input.rescaled). Rank 0 carries the samples and the
    metrics of all. The worker-side model state (a compressed MLP sync's residual, MLP
    gradients waiting for a step) does not map between ranks: none is taken up, said (by rank
    0, where `say`: the look before the restore says nothing)."""
    if point.ranks == world or not point.cut or not point.offsets_known:  # as taken, or nothing to map (yet)
        return point.parts[rank] if rank < len(point.parts) else point
    check_ranks(point, world)
    parts = point.parts or (point,)
    taken = len(parts)
    if _in_a_topic(point):
        offsets: dict[str, int] = {}
        for i, part in enumerate(parts):
            assert part.position is not None and part.position.partitions is not None
            offsets.update({p: o for p, o in part.position.partitions.items() if int(p) % taken == i})
        topic_id = next((p.position.topic_id for p in parts if p.position is not None and p.position.topic_id), "")
        first = parts[0].position
        assert first is not None
        position = Position(first.file, first.offset, first.line, offsets, topic_id)
    else:  # files: every rank reads its new share knowing where each of the old ranks stood
        position = Position(prior=rescaled.prior_of(taken, [vars(p.position) for p in parts if p.position is not None]))
        if rank == 0 and say:
            log.info(
                "checkpoint cut %d was taken by %d rank(s), taken up by %d: the stream's files are dealt out anew, and"
                " each rank reads the files of its share that those ranks had not read, from where they stood",
                point.cut,
                taken,
                world,
            )
    dropped = [i for i, p in enumerate(parts) if p.model]
    if dropped and rank == 0 and say:
        log.warning(
            "checkpoint cut %d was taken by %d rank(s), taken up by %d: the model's worker-side state of rank(s) %s"
            " (a compressed MLP sync's residual, MLP gradients waiting for a step) is not carried over",
            point.cut,
            taken,
            world,
            ", ".join(map(str, dropped)),
        )
    if rank != 0:
        return CutPoint(point.cut, position, offsets_known=point.offsets_known, at=point.at)
    window = taken * max((len(p.progress.get("labels", ())) for p in parts if p.progress), default=0)
    states = [p.progress for p in parts if p.progress]
    progress = ProgressiveMetrics.merge(max(1, window), states).state() if states else {}
    samples = sum(p.samples for p in parts)
    return CutPoint(point.cut, position, samples, progress, offsets_known=point.offsets_known, at=point.at)


def worker_state(
    position: Position, samples: int, progress: dict[str, Any], model: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What a cut records of one worker (JSON-ready): position, samples, metrics, and what
    the model keeps on the worker (TrainableModel.state: 1-bit Adam's momentum). The
    metrics window's predictions go in float16: every cut sends them (tens of KB), and a
    restarted window's AUC moves in its 4th decimal at most; the sums stay exact."""
    metrics = {
        "count": progress["count"],
        "positives": progress["positives"],
        "loss_sum": progress["loss_sum"],
        **_labels_text(np.asarray(progress["labels"])),
        "probs16": array_text(progress["probs"], "<f2"),
    }
    # "at": the cut's wall time, to tell files that changed after it (StreamSource._say_late)
    return {"position": vars(position), "samples": samples, "progress": metrics, "model": model or {}, "at": time.time()}


def encode_offsets(position: Position, samples: int, progress: ProgressiveMetrics, model: dict[str, Any] | None = None) -> bytes:
    return _packed(worker_state(position, samples, progress.state(), model))


def encode_workers(states: list[dict[str, Any]]) -> bytes:
    """A cut of several workers: each one's worker_state, in worker order."""
    return _packed({"workers": states})


def _packed(doc: dict[str, Any]) -> bytes:
    """Every cut sends its offsets to a shard: zstd'd, its frame holding its length."""
    return compressor().compress(json.dumps(doc).encode())


def decode_offsets(cut: int, blob: bytes) -> CutPoint:
    """A cut's offsets; a bare position (checkpoints before cuts held metrics) reads too."""
    if not blob:
        return CutPoint(cut)
    if blob.startswith(zstandard.FRAME_HEADER):
        blob = decompressor().decompress(blob, max_output_size=MAX_OFFSETS_BYTES)
    d = json.loads(blob)
    if "workers" in d:
        return CutPoint(cut, parts=tuple(_part(cut, w) for w in d["workers"]))
    if "position" not in d:
        return CutPoint(cut, Position(**d))
    return _part(cut, d)


def _labels_text(labels: npt.NDArray[Any]) -> dict[str, Any]:
    """The metrics window's labels: one bit each when they are 0 and 1 (every cut sends
    them to every shard, so they are a cut's largest part), else float32."""
    if np.all((labels == 0) | (labels == 1)):
        return {
            "label_bits": base64.b64encode(np.packbits(labels.astype(np.uint8)).tobytes()).decode(),
            "label_count": len(labels),
        }
    return {"labels": array_text(labels, "<f4")}


def _part(cut: int, d: dict[str, Any]) -> CutPoint:
    progress = dict(d.get("progress") or {})
    if "label_bits" in progress:
        bits = np.frombuffer(base64.b64decode(progress.pop("label_bits")), dtype=np.uint8)
        progress["labels"] = np.unpackbits(bits)[: int(progress.pop("label_count"))].astype(np.float32)
    for k in ("labels", "probs"):
        if isinstance(progress.get(k), str):  # cuts before 2026-12-02 held the predictions in float32
            progress[k] = text_array(progress[k], "<f4")
    if isinstance(progress.get("probs16"), str):
        progress["probs"] = np.asarray(text_array(progress.pop("probs16"), "<f2"), dtype=np.float32)
    model = dict(d.get("model") or {})
    return CutPoint(cut, Position(**d["position"]), int(d.get("samples", 0)), progress, model=model, at=float(d.get("at", 0.0)))


def load_progress(progress: ProgressiveMetrics, state: dict[str, Any]) -> None:
    """Sets `progress` to a cut's metrics (nothing: empty)."""
    fresh = ProgressiveMetrics.merge(progress.window, [state]) if state else ProgressiveMetrics(progress.window)
    vars(progress).update(vars(fresh))


def common_cut(statuses: list[ShardStatus]) -> int:
    """The newest cut every shard holds (0 when none holds any). Shards that hold no cut in
    common while some hold cuts stop the trainer: no state is consistent across them."""
    held = [set(s.cuts) for s in statuses]
    if not any(held):
        return 0
    common = set.intersection(*held)
    if not common:
        empty = [s.index for s in statuses if not s.cuts]
        if empty:  # the others hold cuts: these lost their data (a new disk, a deleted folder), not just time
            raise cfg.ConfigError(
                f"PS shard(s) {', '.join(map(str, empty))} hold no checkpoint cut while the others do: their data"
                " was lost (a new or emptied --data-dir). Restore their data directories, or start every shard"
                " over with --from-start"
            )
        detail = "; ".join(f"shard {s.index}: {sorted(s.cuts) or 'none'}" for s in statuses)
        raise cfg.ConfigError(
            f"the PS shards hold no checkpoint cut in common ({detail}): restore their data directories"
            " to one cut, or start over with --from-start"
        )
    cut = max(common)
    committed = {s.index: s.committed_cut for s in statuses}
    if all(c < cut for c in committed.values()):
        log.warning(
            "every PS shard prepared checkpoint cut %d and none committed it (committed: %s): the trainer stopped"
            " between the two; taking up there",
            cut,
            committed,
        )
    elif len(set(committed.values())) != 1:
        behind = [i for i, c in committed.items() if c <= cut]
        log.warning(
            "the PS shards hold different cuts (committed: %s): shard(s) %s hold an older cut (a restart before its"
            " commit, or a restored backup); going back to cut %d, the newest all of them hold",
            committed,
            ", ".join(map(str, behind)),
            cut,
        )
    return cut


def planned_point(statuses: list[ShardStatus], from_start: bool) -> CutPoint:
    """Where restore_shards would take up, read from the shards' status without changing them: the
    trainer resolves its field list there, so that the restore can name the whole model
    (a shard holding another one refuses it before it changes)."""
    if from_start:
        return CutPoint(0)
    cut = common_cut(statuses)
    if not cut:
        return CutPoint(0)
    keeper = statuses[OFFSETS_SHARD]  # the one shard a cut's offsets go to (ControlPlane.prepare)
    if keeper.committed_cut == cut:
        return decode_offsets(cut, keeper.checkpoint_offsets)
    return CutPoint(cut, offsets_known=False)  # its shard has not committed it yet: the restore will tell


def restore_shards(client: PSClient, from_start: bool, attempts: int = 5) -> CutPoint:
    """Takes every shard to the newest common cut (or to empty tables with from_start),
    under a new trainer generation, and returns where training takes up. A shard that
    restarts meanwhile makes it start over."""
    for attempt in range(attempts):
        client.transport.forget_incarnations()  # whichever process answers is restored
        try:
            return _restore_once(client, from_start)
        except ShardRestarted as e:
            if attempt == attempts - 1:
                raise
            log.warning("%s during the restore; restoring again", e)
    raise AssertionError("unreachable")


def restore_and_declare(client: PSClient, declare: Callable[[PSClient], None], from_start: bool, attempts: int = 5) -> CutPoint:
    """restore_shards, then the model's tables declared (a restore to empty tables drops
    them); a shard that restarts before they are declared makes it start over."""
    for attempt in range(attempts):
        point = restore_shards(client, from_start)
        try:
            declare(client)
            return point
        except ShardRestarted as e:
            if attempt == attempts - 1:
                raise
            log.warning("%s while declaring the tables; restoring again", e)
    raise AssertionError("unreachable")


def _restore_once(client: PSClient, from_start: bool) -> CutPoint:
    statuses = client.control.status()
    generation = max(s.generation for s in statuses) + 1
    cut = 0 if from_start else common_cut(statuses)
    client.control.restore(cut, generation)
    if not cut:
        log.info("PS shards start empty%s (trainer generation %d)", " (--from-start)" if from_start else "", generation)
        return CutPoint(0)
    point = decode_offsets(cut, client.control.status()[OFFSETS_SHARD].checkpoint_offsets)
    where = point.position if not point.parts else "; ".join(f"part {i} at {p.position}" for i, p in enumerate(point.parts))
    log.info("PS shards at checkpoint cut %d (trainer generation %d); the stream takes up at %s", cut, generation, where)
    return point
