"""Trainer daemon: wiring of config, source, PS client, exporter and metrics."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ctr.data.continuous_fields import continuous_fields
from ctr.data.csv_line import CsvQuoteError, header_names, split_header
from ctr.data.fields import FieldIndex, cross_name
from ctr.data.formats import ParsedSample, make_parser, resolve_fields
from ctr.data.label_leaks import label_determining
from ctr.data.number_text import detect as detect_number_text
from ctr.data.sample_file import parse_file
from ctr.data.schema import DELIMITED, LABEL_NAMES, PRESETS, FeatureSchema, detect_schema
from ctr.model.optim import FP32_MANTISSA
from ctr.model.registry import family
from ctr.model.spec import ModelSpec
from ctr.runtime import config as cfg
from ctr.runtime import daemon, strict_json
from ctr.runtime.extras import require
from ps.api import ModelIdentity, ShardRestarted, ShardStatus, StoppedWhileUnreachable
from ps.client import PSClient
from ps.client.auto_codec import EXACT_CODEC
from ps.client.push_compression import CUT_DRAIN_CODECS
from ps.compression.compressor import parse_codec
from ps.compression.payload import VALUE_CODECS
from trainer.config import ENV_PREFIX, HELP_EXAMPLES, HELP_GROUPS, TrainerConfig
from trainer.input.bad_input import BadInput, message, too_bad
from trainer.input.kafka_config import read_kafka_config
from trainer.input.source import Position, Source, StreamSource, open_source
from trainer.run.agreement import folders_verdict, group_settings, shards_verdict
from trainer.run.cut_interval import cut_interval
from trainer.run.exporter import Exporter
from trainer.run.loop import LoopSettings, Trainer, merged_wire
from trainer.run.progress_log import ProgressLog
from trainer.run.recovery import planned_point, rank_part, restore_and_declare, restore_shards, sample_limit
from trainer.run.rendezvous import EXIT_RESTART, GroupLost, rendezvous
from trainer.run.summary import summary_text
from trainer.spec import model_spec
from trainer.step.dense_sync import parse_dense_codec
from trainer.step.factorization import TrainableModel, build_model
from trainer.step.progressive import ProgressiveMetrics

if TYPE_CHECKING:
    from ps.client.local_aggregate import AggregationPlan
    from trainer.run.group import Group


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cfg.add_arguments(parser, TrainerConfig, HELP_GROUPS, HELP_EXAMPLES)


def load_schema(conf: TrainerConfig) -> FeatureSchema | None:
    """The configured schema; None means detect it from the first line."""
    if conf.input.schema:
        if not Path(conf.input.schema).is_file():
            raise cfg.ConfigError(f"--schema {conf.input.schema}: no such file")
        try:
            schema = FeatureSchema.from_dict(yaml.safe_load(Path(conf.input.schema).read_text()) or {})
        except (ValueError, yaml.YAMLError) as e:
            raise cfg.ConfigError(f"--schema {conf.input.schema}: {e}") from None
    elif conf.input.format == "auto" or conf.input.format in DELIMITED:  # told from the first line
        delimiters = DELIMITED.get(conf.input.format)
        return with_csv_header(None, conf.input.csv_header, conf.input.label, delimiters) if conf.input.csv_header else None
    elif conf.input.format not in PRESETS:
        known = ", ".join(["auto", *DELIMITED, *PRESETS])
        raise cfg.ConfigError(f"--format: unknown format {conf.input.format!r}; known: {known}")
    else:
        schema = PRESETS[conf.input.format]
    schema = replace(schema, label=conf.input.label) if conf.input.label else schema
    return with_csv_header(schema, conf.input.csv_header, conf.input.label) if conf.input.csv_header else schema


def own_outputs(conf: TrainerConfig) -> tuple[str, ...]:
    """What this trainer writes (its --export-dir, --metrics-out, --curve-out, batch cache...):
    a source folder that holds one of them does not read it back as samples."""
    cache = conf.input.batch_cache
    return (*cfg.output_paths(conf), *([cache] if cache and cache.lower() not in ("off", "none") else []))


def with_csv_header(
    schema: FeatureSchema | None, header: str, label: str | None, delimiters: tuple[str, ...] | None = None
) -> FeatureSchema:
    """The schema with --csv-header's column names (detected from them under --format auto,
    csv or tsv)."""
    try:
        schema = schema or detect_schema(header, label, delimiters)
        if schema.format != "csv":
            raise ValueError(f"it is for csv input, and the format is {schema.format}")
        names = header_names(header, schema.delimiter)
    except ValueError as e:
        raise cfg.ConfigError(f"--csv-header {header!r}: {e}") from None
    if schema.label not in names:
        raise cfg.ConfigError(f"--csv-header {header!r}: no label column {schema.label!r} (--label names it)")
    return replace(schema, header=header)


def topic_header(conf: TrainerConfig, schema: FeatureSchema, lines: list[str]) -> FeatureSchema:
    """A csv topic's schema with its columns: a topic's messages carry no per-partition
    header, so the first peeked message that names the label column is the topic's header
    (a producer's header message); without one the topic needs --csv-header."""
    if schema.format != "csv" or schema.header or not conf.input.source.startswith("kafka://"):
        return schema
    for line in lines:
        try:
            if schema.label in split_header(line, schema.delimiter):
                return replace(schema, header=line.rstrip("\r\n"))
        except ValueError:
            continue
    raise cfg.ConfigError(
        f"--source {conf.input.source}: csv messages carry no header, and the topic's first messages hold none"
        f" naming the label column {schema.label!r}: give the columns with --csv-header 'NAME,NAME,...'"
    )


def check_codecs(conf: TrainerConfig) -> None:
    try:
        if conf.ps_access.push_codec not in ("auto", "none"):
            parse_codec(conf.ps_access.push_codec)
    except ValueError as e:
        raise cfg.ConfigError(f"--push-codec: {e}") from None
    if conf.ps_access.pull_cache not in ("auto", "on", "off"):
        raise cfg.ConfigError(f"--pull-cache: {conf.ps_access.pull_cache!r} is not one of auto, on, off")
    if conf.ps_access.pull_cache_rows < 1:
        raise cfg.ConfigError(f"--pull-cache-rows {conf.ps_access.pull_cache_rows}: must be >= 1")
    if conf.ps_access.pull_codec not in ("auto", "raw") and conf.ps_access.pull_codec not in VALUE_CODECS:
        raise cfg.ConfigError(
            f"--pull-codec: unknown value codec {conf.ps_access.pull_codec!r}; known: auto, raw, {', '.join(VALUE_CODECS)}"
        )
    try:
        parse_dense_codec(conf.ps_access.dense_codec)
        dense_allreduce(conf)
    except ValueError as e:
        raise cfg.ConfigError(str(e)) from None
    widths = (("--mlp-moment-bits", conf.ps_access.mlp_moment_bits), ("--mlp-weight-bits", conf.ps_access.mlp_weight_bits))
    for flag, bits in widths:
        if bits != "auto" and not (bits.isdigit() and 1 <= int(bits) <= FP32_MANTISSA):
            raise cfg.ConfigError(f"{flag} {bits!r}: auto, or the mantissa bits to keep, 1 to {FP32_MANTISSA}")
    if conf.ps_access.cut_drain_codec not in ("auto", *CUT_DRAIN_CODECS):
        raise cfg.ConfigError(f"--cut-drain-codec {conf.ps_access.cut_drain_codec!r}: one of auto, {', '.join(CUT_DRAIN_CODECS)}")
    if conf.ps_access.residual_rows < 1:
        raise cfg.ConfigError(f"--residual-rows {conf.ps_access.residual_rows}: the error-feedback memory needs at least 1 row")


def dense_allreduce(conf: TrainerConfig, remote: bool = False) -> tuple[int, int] | None:
    """--dense-allreduce: None (exact), or PowerSGD's (rank, warm-up rounds); auto: PowerSGD
    where the PS calls compress (shard processes, --push-codec auto), so the uncompressed
    protocol stays uncompressed between ranks too. Parsed without importing torch
    (trainer.step.low_rank_sync does, where ranks train a DNN)."""
    text = conf.parallel.dense_allreduce
    if text == "auto":
        return AUTO_LOW_RANK if remote and conf.ps_access.push_codec == "auto" else None
    if text == "exact":
        return None
    name, _, rest = text.partition(":")
    parts = rest.split(":") if rest else []
    try:
        if name != "powersgd" or len(parts) > 2:
            raise ValueError
        rank, warmup = int(parts[0]) if parts else 4, int(parts[1]) if len(parts) > 1 else 100
    except ValueError:
        raise ValueError(f"--dense-allreduce {text!r}: exact, or powersgd[:RANK[:WARMUP_ROUNDS]]") from None
    if rank < 1 or warmup < 2:
        raise ValueError(f"--dense-allreduce {text!r}: RANK >= 1 and WARMUP_ROUNDS >= 2 (error feedback starts from the 2nd)")
    return rank, warmup


def moment_bits(conf: TrainerConfig, remote: bool) -> int:
    """--mlp-moment-bits: auto rounds the MLP's moments at cuts where the cut writes
    travel compressed (shard processes, --push-codec auto), and nowhere else."""
    return _mlp_bits(conf, conf.ps_access.mlp_moment_bits, AUTO_MOMENT_BITS, remote)


def weight_bits(conf: TrainerConfig, remote: bool) -> int:
    """--mlp-weight-bits: auto rounds the MLP's weights at cuts where the cut writes
    travel compressed (shard processes, --push-codec auto), and nowhere else."""
    return _mlp_bits(conf, conf.ps_access.mlp_weight_bits, AUTO_WEIGHT_BITS, remote)


def _mlp_bits(conf: TrainerConfig, bits: str, auto: int, remote: bool) -> int:
    if bits != "auto":
        return int(bits)
    return auto if remote and conf.ps_access.push_codec == "auto" else FP32_MANTISSA


def cut_drain_codec(conf: TrainerConfig, remote: bool) -> str:
    """--cut-drain-codec: auto sends a cut's residuals in bf16z where `auto` compresses
    pushes (shard processes), exactly everywhere else."""
    codec = conf.ps_access.cut_drain_codec
    if codec != "auto":
        return codec
    return AUTO_CUT_DRAIN_CODEC if remote and conf.ps_access.push_codec == "auto" else EXACT_CODEC


def keeps_pulled_rows(conf: TrainerConfig) -> bool:
    """--pull-cache: on, off, or auto: on for shard processes, where rows cost wire bytes,
    unless the host's ranks sum their pushes (--local-aggregate: no worker's copy follows them)."""
    cache = conf.ps_access.pull_cache
    if cache == "auto":
        return not conf.local and not conf.parallel.local_aggregate
    return cache == "on"


def addresses_of(conf: TrainerConfig) -> list[str]:
    return conf.ps_access.addresses()


# `--pull-codec auto` where several ranks write the rows (docs/design/auto-codec.md): bf16 in
# zstd'd byte planes (two-rank Frappe FFM pulls 1.5x fewer bytes than bf16's, LR 1.1x)
AUTO_PULL_CODEC = "bf16z"
# `--mlp-moment-bits auto` where cut writes compress (docs/design/moment-bits.md): a DeepFM
# cut write of Frappe's MLP about 2x smaller than with whole moments (bf16's 7 bits: 1.8x)
AUTO_MOMENT_BITS = 4
# `--mlp-weight-bits auto` there too: the weights' share of a Frappe DeepFM write 2.1x
# smaller (2.42 -> 1.14 B a parameter), the write 1.4x; 7 bits save nothing more
AUTO_WEIGHT_BITS = 8
# `--cut-drain-codec auto` on shard processes (docs/design/cut-drains.md)
AUTO_CUT_DRAIN_CODEC = "bf16z"
# `--dense-allreduce auto` where PS calls compress: PowerSGD rank 4 after 100 exact rounds
# (docs/design/low-rank-sync.md: two DeepFM ranks on Frappe 12.7x fewer bytes between them
# over 1M samples, served AUC +0.0004 against exact sums)
AUTO_LOW_RANK = (4, 100)


def connect(conf: TrainerConfig, stopping: Callable[[], bool] = lambda: False, ranks: int = 1) -> PSClient:
    """The PS client of this rank of `ranks`. `--pull-codec auto` is raw state, except for
    several ranks on shard processes: there another rank's pushes send a row back to every
    rank that holds it, whole, and pulls become most of the bytes, so they travel in bf16z.
    `--push-codec auto` judges 1-bit pushes per table (docs/design/auto-codec.md). Where
    several ranks push the same rows (not through --local-aggregate's one leader), each
    bounds what its error feedback holds back (docs/design/residual-bound.md)."""
    access = conf.ps_access
    if conf.local:
        local = conf.local_ps
        data = Path(local.data_dir) if local.data_dir else None
        exports = Path(conf.export.export_dir) if conf.export.export_dir else None
        return PSClient.local(
            local.shards, access.push_codec, access.residual_rows, conf.learner.seed, access.pull_codec, data,
            local.lifecycle.policy(), exports,
        )  # fmt: skip
    import grpc  # only for shard processes

    addresses = addresses_of(conf)
    pull_codec = AUTO_PULL_CODEC if access.pull_codec == "auto" and ranks > 1 else access.pull_codec
    client = PSClient.connect(
        addresses,
        access.push_codec,
        access.residual_rows,
        conf.learner.seed,
        pull_codec,
        access.ps_retry_s,
        stopping,
        access.ps_call_timeout_s,
        1 if conf.parallel.local_aggregate else ranks,  # one leader pushes the host's sums
        cut_drain_codec(conf, remote=True),
    )
    for addr, ch in zip(addresses, client.transport.channels, strict=True):  # type: ignore[attr-defined]
        ready, until = grpc.channel_ready_future(ch), time.monotonic() + 30
        while True:  # in slices, so that SIGTERM ends the wait
            try:
                ready.result(timeout=0.25)
                break
            except grpc.FutureTimeoutError:
                if stopping():
                    raise StoppedWhileUnreachable(f"asked to stop while PS shard {addr} was not reachable yet") from None
                if time.monotonic() > until:
                    raise SystemExit(f"PS shard {addr} is not reachable") from None
    return client


def detect_from(lines: list[str], label: str | None = None, every: bool = False, fmt: str = "auto") -> FeatureSchema | None:
    """The schema of the first line whose format can be told; None when there is no line.
    Lines none of which tell their format are refused at once, naming why the first does not.
    The first 100 lines are tried, or `every` line (a topic's partitions interleave, so its
    header message may come late in a peek). fmt csv or tsv: only a header so delimited."""
    first: ValueError | None = None
    for line in lines if every else lines[:100]:
        try:
            return detect_schema(line, label, DELIMITED.get(fmt))
        except ValueError as e:
            first = first or e
    if first is not None:
        csv_header = ", or --csv-header for csv messages without a header" if every else ""
        raise cfg.ConfigError(f"--format {fmt}: {first}; give --format, --label or a --schema YAML{csv_header}")
    return None


def resolve(conf: TrainerConfig, schema: FeatureSchema | None, source: Source) -> tuple[FeatureSchema | None, FieldIndex]:
    """The schema and the stream's field index, from the schema or the stream's first lines."""
    needs_fields = family(conf.learner.model).needs_fields
    fixed = schema is not None and bool(schema.base_fields())
    lines = [] if fixed else source.peek(timeout_s=conf.input.peek_timeout_s)
    if schema is None:
        schema = detect_from(lines, conf.input.label, conf.input.source.startswith("kafka://"), conf.input.format)
    if schema is not None:
        schema = topic_header(conf, schema, lines)
    if schema is None:
        if needs_fields:
            raise cfg.ConfigError(
                f"--model {conf.learner.model}: needs the field list, but no data came within --peek-timeout-s"
                " and --format is auto"
            )
        return None, FieldIndex()
    try:
        index = resolve_fields(schema, lines, freeze=needs_fields)
    except CsvQuoteError as e:  # the first file's header
        raise cfg.ConfigError(f"--source {conf.input.source}: {e}") from e
    if needs_fields and len(index) == 0:
        raise cfg.ConfigError(
            f"--model {conf.learner.model}: needs the field list; give schema fields, or data within --peek-timeout-s"
            f" ({conf.input.source})"
        )
    log = logging.getLogger("trainer")
    leaking = [n for n in LABEL_NAMES if n != schema.label and n in index.names and n not in schema.skip]
    if schema.format == "csv" and leaking:
        log.warning(
            "column(s) %s train as features beside the label %r; they are names labels go by: one that is a label, or is"
            " made from one, leaks it into the model (a window AUC near 1.0 says so). Skip them with a --schema YAML"
            " (skip: [%s]) unless they are features",
            ", ".join(leaking),
            schema.label,
            ", ".join(leaking),
        )
    samples = peeked_samples(schema, index, lines)
    crosses = [cross_name(a, b) for a, b in schema.cross]
    determining = label_determining(samples, index, (*crosses, *leaking))
    if determining:
        log.warning(
            "field(s) %s give the label away in the stream's first %d samples: each of their values (or their absence) is"
            " seen with one label only. A copy of the label, or something known only after the click, leaks it: the"
            " progressive AUC comes near 1.0 and the served model, which does not get it at request time, does worse."
            " Skip them with a --schema YAML (skip: [%s]) unless they are known when serving",
            ", ".join(determining),
            len(samples),
            ", ".join(determining),
        )
    continuous = continuous_fields(samples, index, (*schema.numeric, *crosses, *schema.skip))
    if continuous:
        log.warning(
            "field(s) %s hold numbers that nearly all differ in the stream's first %d samples (%s): each distinct number"
            " trains as a category of its own, seen about once, so they teach the model little. List them under numeric:"
            " in a --schema YAML (numeric: [%s]) to bucket them, or skip: them",
            ", ".join(name for name, _, _ in continuous),
            len(samples),
            ", ".join(f"{name} {distinct} values in {seen}" for name, distinct, seen in continuous),
            ", ".join(name for name, _, _ in continuous),
        )
    if samples and not schema.number_text:  # how the stream writes its numbers, for clients (ctr.data.number_text)
        schema = replace(schema, number_text=detect_number_text(samples, index, (*schema.numeric, *crosses)))
    return schema, index


def peeked_samples(schema: FeatureSchema, index: FieldIndex, lines: list[str]) -> list[ParsedSample]:
    """The stream's first lines parsed (bad ones left out), on a copy of the field index:
    the stream's own is not grown by it."""
    probe = FieldIndex(tuple(index.names), cap=index.cap, frozen=index.frozen)
    header = lines[0] if schema.format == "csv" and not schema.header else (schema.header or None)
    body = lines[1:] if schema.format == "csv" and not schema.header else lines
    try:
        parse = make_parser(schema, probe, header)
    except ValueError:  # a header it cannot read (ParseError): nothing to learn from the peek
        return []
    return parse_file(body[:2000], parse, "peek", 1).samples


def batch_size(conf: TrainerConfig, spec: ModelSpec) -> int:
    """--batch-size, or its default: large where batches only amortize per-batch costs."""
    if conf.learner.batch_size < 0 or conf.input.max_line_bytes < 1:
        raise cfg.ConfigError("--batch-size must be >= 0 and --max-line-bytes >= 1")
    if conf.learner.batch_size:
        return conf.learner.batch_size
    if spec.is_dnn or spec.update != "example":
        return 256
    # one worker trains the same model at any batch size, and each batch costs a round of
    # RPCs (several workers read each other's updates up to a batch late: a smaller
    # --batch-size trades speed for that, docs/benchmarks.md measures both)
    return 16384


def _restarted_during(client: PSClient, model: TrainableModel) -> bool:
    """Declares the model's tables; True when a shard restarted since the restore (the
    caller restores again)."""
    try:
        model.prepare(client)
        return False
    except ShardRestarted:
        return True


def _run_rank(trainer: Trainer, group: Group, log: logging.Logger) -> dict[str, float]:
    """A rank's run; a lost rank or shard ends it with EXIT_RESTART (SystemExit), for its
    supervisor to start every rank again at the last common cut."""
    try:
        return trainer.run()
    except (GroupLost, ShardRestarted) as e:
        log.error("rank %d: %s; exiting with %d for a restart at the last checkpoint cut", group.rank, e, EXIT_RESTART)
        raise SystemExit(EXIT_RESTART) from None


def run(args: argparse.Namespace) -> int:
    return train(cfg.build(TrainerConfig, ENV_PREFIX, args))


def train(conf: TrainerConfig, aggregation: AggregationPlan | None = None, name: str = "trainer") -> int:
    """aggregation: the host's shared memory for --local-aggregate, when this process is
    one of --workers local ranks (trainer.local_ranks)."""
    log = daemon.setup_logging(name, conf.log_level)
    check_codecs(conf)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        train_run(conf, stop, log, aggregation)
    except StoppedWhileUnreachable as e:
        # exactly once still holds: the shards and the stream go back to the last cut
        log.warning("%s: stopped; the next start takes up from the last checkpoint cut", e)
    except (ValueError, OSError):  # a configuration the ranks refused (trainer.run.agreement), a bad path...
        _leave_group()
        raise
    return 0


def _leave_group() -> None:
    """Ends this process's torch.distributed group, if it formed one: a process that exits
    with gloo's threads alive can abort in C++ ("terminate called without an active
    exception", SIGABRT) instead of leaving with its error's exit code. Without a group,
    torch is not imported."""
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_initialized():
        dist.destroy_process_group()


def check_shard_list(conf: TrainerConfig, statuses: list[ShardStatus]) -> None:
    """--ps lists every shard once, in shard order: refused before anything is restored or
    declared (a wrong list would route keys to shards that do not own them)."""
    addresses = addresses_of(conf)
    for i, (addr, st) in enumerate(zip(addresses, statuses, strict=True)):
        if st.count != len(addresses) or st.index != i:
            raise cfg.ConfigError(
                f"--ps: address {i + 1} of {len(addresses)}, {addr}, is shard {st.index} of {st.count};"
                f" list all {st.count} shards in shard order (--shard-index 0, 1, ...)"
            )
        if conf.export.export_dir and Path(st.export_root or "/").resolve() != Path(conf.export.export_dir).resolve():
            root = f"--export-root {st.export_root}" if st.export_root else "no --export-root (it writes no exports)"
            raise cfg.ConfigError(
                f"--export-dir {conf.export.export_dir}: PS shard {i} at {addr} has {root}; an export's files come from both,"
                " so give the trainer the shards' folder"
            )


def ends(conf: TrainerConfig) -> bool:
    """The run has an end that is not a stop: the source's end, idleness or a sample limit."""
    return not conf.input.follows() or conf.input.idle_exit_s > 0 or conf.input.max_samples > 0


def check_source(conf: TrainerConfig) -> None:
    """A path that is not there fails at once (not after --peek-timeout-s)."""
    if conf.input.source.startswith("s3://"):
        from trainer.input.s3_source import check_prefix  # boto3 loads only for S3

        try:
            check_prefix(conf.input.source)
        except ValueError as e:
            raise cfg.ConfigError(f"--source {conf.input.source}: {e}") from None
    elif conf.input.source != "-" and not conf.input.source.startswith("kafka://") and not Path(conf.input.source).exists():
        raise cfg.ConfigError(f"--source {conf.input.source}: no such file or folder")
    if conf.input.kafka_config:
        try:
            read_kafka_config(conf.input.kafka_config)  # at once, before any process or connection starts
        except ValueError as e:
            raise cfg.ConfigError(str(e)) from None
    if not 0 <= conf.input.max_bad_fraction <= 1:
        raise cfg.ConfigError(f"--max-bad-fraction {conf.input.max_bad_fraction}: must be within 0..1")


def form_group(conf: TrainerConfig) -> Group | None:
    """The ranks' group when the flags or the environment name one of several (None: this
    process trains alone)."""
    rv = rendezvous(conf.parallel.rank, conf.parallel.world_size, conf.parallel.master, os.environ)
    if rv.world == 1:
        return None
    if conf.local:
        raise cfg.ConfigError(
            f"--world-size {rv.world}: the ranks share shard processes (--ps HOST:PORT,...);"
            " --ps local shards live in one process"
        )
    require("torch")  # the group is torch.distributed's
    from trainer.run.group import Group

    try:
        return Group(rv, group_settings(conf, rv.world))
    except GroupLost as e:  # rank 0 or a rank it waited for went away before the group formed
        logging.getLogger("trainer").error("rank %d: %s; exiting with %d to be started again", rv.rank, e, EXIT_RESTART)
        raise SystemExit(EXIT_RESTART) from None


def check_same_shards(conf: TrainerConfig, group: Group, statuses: list[ShardStatus]) -> None:
    """Every rank reaches the shard processes rank 0 reaches (by their incarnations, so that
    hosts may name them differently): a rank pointed at another PS would push into a model
    nobody exports. A shard that restarted between the ranks' looks restarts the group."""
    seen = group.gather((addresses_of(conf), [st.incarnation for st in statuses]))
    verdict = group.broadcast(shards_verdict(seen) if seen is not None else None)
    if verdict == "restarted":
        logging.getLogger("trainer").error(
            "rank %d: a PS shard restarted while the ranks met; exiting with %d to be started again", group.rank, EXIT_RESTART
        )
        raise SystemExit(EXIT_RESTART)
    if verdict != "same":
        raise cfg.ConfigError(verdict)


def check_same_folder(group: Group, source: Source) -> None:
    """Every rank follows the one folder rank 0 does (trainer.run.agreement.folders_verdict):
    compared by the names of its files, as its path may be another on each host."""
    names = source.names() if isinstance(source, StreamSource) else []
    seen = group.gather(names)
    verdict = group.broadcast(folders_verdict(seen) if seen is not None else None)
    if verdict:
        raise cfg.ConfigError(verdict)


@contextmanager
def start_up_frozen() -> Iterator[None]:
    """Every object of start-up (torch, numba, the model) out of the cyclic collector's reach
    while training runs: a full collection then walks only what training made since. Without
    it one fell at the start of the pass and walked them all, about 130 ms for DeepFM (5% of a
    2.4 s pass over Frappe; wdl there, three alternating runs: 33.2-33.9k examples/s before,
    34.6-37.0k after). They are handed back after it, so an in-process caller's
    (boundless.api) garbage of one run is collected before the next."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def train_run(
    conf: TrainerConfig,
    stop: threading.Event,
    log: logging.Logger,
    aggregation: AggregationPlan | None = None,
    on_progress: Callable[[dict[str, float]], None] | None = None,
    announce: bool = True,
) -> dict[str, Any]:
    """One training run to its end (a finite source's end, or `stop`): the summary rank 0
    reports (other ranks: {}). on_progress gets every progress record (boundless.api's bar);
    `announce` prints the ready line a supervisor reads (not from Python: boundless.train)."""
    cpu_start = time.process_time()  # the run's CPU, not the imports before it (or a notebook's)
    check_source(conf)
    schema = load_schema(conf)
    guarded = daemon.guard(conf, conf.host)  # its identity for the PS channels; it serves health only
    group = form_group(conf)
    rank, world = (group.rank, group.world) if group is not None else (0, 1)
    lead = rank == 0
    client = connect(conf, stop.is_set, world)
    statuses = client.control.status()
    if not conf.local:
        check_shard_list(conf, statuses)
    if group is not None:
        check_same_shards(conf, group, statuses)
    names = ["in process"] * len(statuses) if conf.local else addresses_of(conf)
    cut_every, cuts_said, cuts_warn = cut_interval(conf.ps_access.checkpoint_interval_s, statuses, names)
    if not conf.local:  # auto's windows end at cuts, where 1-bit's big cost (the exact drain) falls; without cuts at exports
        client.compression.judge_at = "cut" if cut_every > 0 else "export"
    planned = planned_point(statuses, conf.ps_access.from_start)  # read only: nothing changes before the model is named
    # refused here where the cut is known before the restore (a folder's, by another number of
    # ranks); after it, below. The dropped worker state is said once, after the restore
    planned_here = rank_part(planned, rank, world, say=False)

    def reopen(position: Position | None, cut_at: float = 0.0) -> Source:
        return open_source(
            conf.input.source,
            conf.input.follows(),
            stop=stop.is_set,
            start=position,
            part=(rank, world),
            pattern=conf.input.source_pattern,
            ignore=conf.input.ignored_names(),
            exclude=own_outputs(conf),
            start_at=cut_at,
            kafka_config=conf.input.kafka_config,
        )

    try:
        source = reopen(planned_here.position, planned_here.at)
    except ValueError as e:
        raise cfg.ConfigError(str(e)) from None
    if conf.input.source == "-" and sys.stdin.isatty():  # `boundless train` alone: it waits on the terminal
        log.warning(
            "reading samples from standard input, a terminal: type or paste lines, Ctrl-D ends; --source names a"
            " file, a folder, s3://BUCKET/PREFIX/ or kafka://HOST:PORT/TOPIC"
        )
    if group is not None and conf.input.splits() and not conf.input.source.startswith(("kafka://", "s3://")):
        check_same_folder(group, source)  # a topic or a prefix is one by its URL (group_settings)
    if lead:  # the peek sees the whole folder or prefix, whichever rank's share its first file is
        schema, fields = resolve(conf, schema, source)
    if group is not None:  # every rank trains the field list rank 0 resolved
        schema, fields = group.broadcast((schema, fields) if lead else None)
    spec = model_spec(conf, tuple(fields.names))
    try:
        # the MLP trains on this process's device; ranks sum its gradients over the group
        model = build_model(
            spec,
            conf.parallel.staleness,
            conf.ps_access.dense_codec,
            replicated=True,
            device=conf.learner.device,
            batch_size=batch_size(conf, spec),
            ranks=(rank, world),
            moment_bits=moment_bits(conf, client.transport.remote),
            weight_bits=weight_bits(conf, client.transport.remote),
            low_rank=dense_allreduce(conf, client.transport.remote),
            step_positives=conf.learner.mlp_step_positives,
        )
    except ValueError as e:
        raise cfg.ConfigError(str(e)) from None
    replica = getattr(model, "replica", None)
    if group is not None and replica is not None:  # NCCL between GPUs, else gloo
        group.place_dense(replica.net.device)
    # the shards refuse a trainer of another model (name, type, field list) before they change
    client.transport.model = ModelIdentity.of(conf.export.model_name, spec.type, spec.fields, spec.needs_fields, spec.tables())
    client.transport.replace_model = conf.ps_access.replace_model
    if keeps_pulled_rows(conf):
        client.keep_rows(conf.ps_access.pull_cache_rows)
    if lead:
        point = restore_shards(client, conf.ps_access.from_start)  # exactly once: back to the newest common cut
        again = (
            restore_and_declare(client, model.prepare, conf.ps_access.from_start) if _restarted_during(client, model) else None
        )
        point = again if again is not None else point
    if group is not None:  # the other ranks wait for rank 0's restore and push under its generation
        point, generation = group.broadcast((point, client.transport.generation) if lead else None)
        client.transport.generation = generation
        client.know(spec.tables())
    mine = rank_part(point, rank, world)  # a cut every shard prepared and none committed is read at the restore
    if aggregation is not None:  # the host's ranks push their sums through rank 0 (--local-aggregate)
        client.aggregate_locally(aggregation, rank)
    if (mine.cut, mine.position) != (planned.cut, planned_here.position):  # a shard restarted meanwhile: the cut moved
        source = reopen(mine.position)
    log.info(
        "model %s, %d fields, tables %s", spec.type, len(fields), ", ".join(f"{t.name}:{t.optimizer.kind}" for t in spec.tables())
    )
    if lead:
        log.log(logging.WARNING if cuts_warn else logging.INFO, "%s", cuts_said)
    metrics_port = daemon.metrics_server(conf.host, conf.metrics_port) if conf.metrics_port >= 0 else -1
    served, grpc_port = None, -1
    if conf.port >= 0:  # health only: the trainer is a client of the PS and serves nothing else
        served = daemon.serve(conf, "trainer", lambda s: None, [], guarded)
        served.ready()
        grpc_port = served.port
    exporter = None
    if conf.export.export_dir and lead:  # rank 0 exports for the group
        exporter = Exporter(
            client,
            Path(conf.export.export_dir),
            conf.export.model_name,
            spec,
            fields,
            schema.to_dict() if schema else {},
            conf.export.full_export_every,
            conf.export.holdout_samples,
        )
    settings = LoopSettings(
        batch_size(conf, spec),
        sample_limit(conf.input.max_samples, point, rank, world),  # each rank its part of a sample limit
        conf.input.idle_exit_s,
        conf.export.export_interval_s,
        cut_every,
        max_line_bytes=conf.input.max_line_bytes,
        batch_cache=None if (conf.input.batch_cache or "").lower() in ("", "off", "none") else conf.input.batch_cache,
        batch_cache_max_bytes=int(conf.input.batch_cache_max_gb * 1e9),
        progress_interval_s=conf.progress.progress_interval_s,
        # a stream that ends (a file, a pipe, --idle-exit-s, --max-samples) has its last export judged
        # on its tail, which is then never trained; a followed stream without an end trains at once
        hold_back=conf.export.holdout_samples if exporter is not None and ends(conf) else 0,
        max_bad_fraction=conf.input.max_bad_fraction,
        export_drain=conf.export.export_drain,
        label=conf.input.label,
        delimiters=DELIMITED.get(conf.input.format),
    )
    progress_log = ProgressLog(conf.progress.curve_out if lead else None, count_samples=world > 1, on_record=on_progress)
    if lead or conf.ready_file:  # a local rank other than 0 has none to write and prints none
        daemon.write_ready_file(conf.ready_file, announce, grpc_port=grpc_port, metrics_port=metrics_port)
    trainer = Trainer(
        client, model, schema, fields, source, settings, ProgressiveMetrics(conf.progress.window), exporter, stop.is_set
    )
    trainer.progress_log = progress_log if lead else None
    trainer.cpu_start = cpu_start
    with start_up_frozen():
        if group is None:
            trainer.take_up(mine, reopen, lambda: rank_part(restore_and_declare(client, model.prepare, False), 0, 1))
            result: dict[str, Any] = dict(trainer.run())
        else:
            trainer.group = group
            group.ledger = client.wire  # the ranks' collectives on the same ledger as the PS calls
            trainer.start_at(mine)
            result = dict(_run_rank(trainer, group, log))
    if group is not None and not lead:
        log.info("rank %d: trained %d samples of its share; rank 0 reports the run", rank, trainer.trained)
        client.close()
        group.close()
        if served is not None:
            served.stop(grace_s=1)
        return {}
    elapsed_s, bad_lines, exports = trainer.elapsed_s, trainer.bad_lines, trainer.exports
    first_bad, read_schema = trainer.reader.first_bad, trainer.reader.schema or schema
    result["held_out_samples"] = float(sum(len(b) for b in trainer.held_out))
    if trainer.reader.cache is not None:
        result["batch_cache_hits"] = float(trainer.reader.cache.hits)
        result["batch_cache_misses"] = float(trainer.reader.cache.misses)
    push_bytes, pull_bytes = client.push_bytes, client.pull_bytes
    if trainer.merged:  # rank 0 of a group: every rank's
        push_bytes, pull_bytes, bad_lines = (
            trainer.merged["push_bytes"],
            trainer.merged["pull_bytes"],
            trainer.merged["bad_lines"],
        )
        fields.dropped = trainer.merged["dropped"]
        result["ranks"] = float(world)
        result["rank_samples"] = trainer.merged["rank_samples"]
        result["rank_cpu_s"] = trainer.merged["rank_cpu_s"]
        result["mlp_replicas_differ"] = float(trainer.merged["replicas_differ"])
    result.update(trainer.merged.get("compression", client.compression_stats()))
    sparse = [t for st in client.control.status() for t in st.tables if t.kind == "sparse"]
    result["checkpoint_interval_s"] = cut_every
    result["sparse_rows"] = float(sum(t.rows for t in sparse))  # the model's size, after the lifecycle
    result["not_admitted"] = float(sum(t.not_admitted for t in sparse))
    result["evicted"] = float(sum(t.evicted for t in sparse))
    result["bad_lines"] = float(bad_lines)
    result["source_files_lost"] = float(trainer.merged.get("lost_files", trainer.lost_files))
    result["source_messages_lost"] = float(trainer.merged.get("lost_messages", trainer.lost_messages))
    result["source_partitions_reset"] = float(trainer.merged.get("partitions_reset", trainer.partitions_reset))
    result["dropped_features"] = float(fields.dropped)
    if fields.dropped:
        log.warning(
            "dropped %d features of fields outside the model's field list, e.g. %s (list them in schema.fields)",
            fields.dropped,
            sorted(fields.unknown)[:10],
        )
    result["exports"] = float(len(exports))
    result["elapsed_s"] = elapsed_s
    # `samples` is the stream's (a cut taken up carries its count on); speed and bytes per
    # sample are over what this run trained
    trained = float(trainer.merged.get("trained", trainer.trained))
    result["trained_samples"] = trained
    result["taken_up_samples"] = float(trainer.merged.get("run_from", trainer.run_from))
    result["examples_per_s"] = trained / elapsed_s if elapsed_s > 0 else 0.0
    # a followed stream waits for data: its speed while data came, beside the wall clock's
    result["idle_s"] = trainer.idle_s
    busy_s = elapsed_s - trainer.idle_s
    result["busy_examples_per_s"] = trained / busy_s if busy_s > 0 else result["examples_per_s"]
    # the run's CPU from its settings on, start-up included (a group's: every rank's, which a
    # parent that forked them through a fork server cannot see as its children's)
    result["cpu_s"] = float(sum(trainer.merged["rank_cpu_s"])) if trainer.merged else time.process_time() - cpu_start
    result["push_bytes"] = float(push_bytes)
    result["pull_bytes"] = float(pull_bytes)
    wire = merged_wire([*trainer.merged.get("wire_others", []), client.wire.snapshot()])  # every call made, the last status's too
    result["wire"] = {t: {k: {"sent": b[0], "received": b[1]} for k, b in kinds.items()} for t, kinds in wire.items()}
    result["wire_bytes"] = float(sum(sum(b) for kinds in wire.values() for b in kinds.values()))
    result["wire_bytes_per_sample"] = result["wire_bytes"] / max(1.0, trained)
    result["push_bytes_per_sample"] = push_bytes / max(1.0, trained)
    result["pull_bytes_per_sample"] = pull_bytes / max(1.0, trained)
    result["push_codec"] = conf.ps_access.push_codec  # type: ignore[assignment]
    result["codecs"] = client.codecs()  # type: ignore[assignment]  # what `auto` chose, per table
    if replica is not None:
        result["mlp_steps"] = float(replica.steps)  # Adam's steps: fewer than batches where they wait for positives
        result["mlp_clipped_steps"] = float(replica.clipped_steps)
        for name, bits in (("mlp_moments", replica.moment_bits), ("mlp_weights", replica.weight_bits)):
            result["codecs"][name] = f"e8m{bits}" if bits < FP32_MANTISSA else "fp32"  # type: ignore[index]
        if world > 1:
            low_rank = replica.low_rank
            result["codecs"]["mlp_allreduce"] = "exact" if low_rank is None else f"powersgd:{low_rank[0]}:{low_rank[1]}"  # type: ignore[index]
    result["workers"] = float(world)
    result["ps"] = "local" if conf.local else "remote"  # type: ignore[assignment]  # local: the bytes never cross a wire
    result["device"] = model.device  # type: ignore[assignment]
    result["staleness"] = float(conf.parallel.staleness)
    result["model"] = {**spec.to_dict(), "fields": list(fields.names)}
    summary = {k: v for k, v in result.items() if k != "model"}
    log.debug("done: %s", json.dumps(summary))
    log.info("done: %s", summary_text(result, conf.export.export_dir, list(exports), conf.progress.metrics_out))
    if conf.progress.metrics_out:
        Path(conf.progress.metrics_out).write_text(strict_json.dumps(result, indent=1))
    client.close()
    if group is not None:
        group.close()
    if served is not None:
        served.stop(grace_s=1)  # NOT_SERVING first, so a probe sees the end
    good = int(result["samples"] + result.get("held_out_samples", 0))
    if too_bad(int(bad_lines), good, conf.input.max_bad_fraction, final=True) or (good == 0 and bad_lines):
        raise BadInput(message(conf.input.source, int(bad_lines), good, first_bad, read_schema))
    if good == 0 and not conf.input.follows() and not stop.is_set():
        raise BadInput(f"--source {conf.input.source}: no sample line came (an empty file or stream)")
    return result
