"""Trainer daemon configuration."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ctr.runtime.config import WRITES, ConfigError, section
from ctr.runtime.server_config import ServerConfig
from ps.config import RowLifecycleSettings

ENV_PREFIX = "BOUNDLESS_TRAINER_"
# names a folder source never reads: dot-files and what producers write before they rename
# a producer's names for what it is still writing, and Hadoop's and Spark's hidden ones
# (`_SUCCESS`, `_temporary`, `_committed_*`: FileInputFormat skips names starting with _ or .)
DEFAULT_IGNORE = (".*", "_*", "*.part", "*.tmp", "*.temp", "*.partial", "*.swp", "*~")

# --help's groups: the most needed settings first, then one group per section, then the
# process's own (ports, logging) and security
HELP_GROUPS: dict[str, tuple[str, ...]] = {
    "essential": ("source", "format", "schema", "label", "model", "model_name", "ps", "export_dir", "metrics_out"),
}
HELP_EXAMPLES = """\
  boundless train --source day1.tsv --format criteo --ps local --export-dir exports
      a Criteo file, in-process shards; ends at the file's end, its tail held out for the last export
  boundless train --source incoming/ --model ffm --k 8 --ps 10.0.0.1:7000,10.0.0.2:7000 --export-dir /shared/exports
      follow a folder of rolling files, on two PS shard processes
  cat data.csv | boundless train --source - --label clicked --metrics-out summary.json
      standard input, a csv whose label column is 'clicked'
"""


@dataclass(frozen=True)
class InputSettings:
    """Where samples come from and how they are read."""

    source: str = field(
        default="-",
        metadata={
            "help": "file or folder to stream ('-' is stdin), s3://BUCKET/PREFIX/ (its objects as a folder's files;"
            " endpoint and credentials from AWS_* variables), or kafka://HOST:PORT/TOPIC"
        },
    )
    format: str = field(
        default="auto",
        metadata={
            "help": "auto (told from the first line); csv, tsv (a header line naming the label), parquet or json (a JSON"
            " object a line, its label a key); or a preset (criteo, avazu, libsvm, libffm, kv, vw...)"
        },
    )
    schema: str | None = field(default=None, metadata={"help": "YAML feature schema; overrides --format"})
    label: str | None = field(
        default=None, metadata={"help": "the label column of csv input (default: click, label, is_attributed, clicked or y)"}
    )
    csv_header: str | None = field(
        default=None,
        metadata={
            "help": "the column names of csv lines that carry no header line, as a header line: 'click,site,app'"
            " (a Kafka topic's messages; a topic whose first messages hold a header needs none); a line equal"
            " to it is skipped"
        },
    )
    max_bad_fraction: float = field(
        default=0.1,
        metadata={
            "help": "stop with an error naming the first bad lines and the likely cause once more than this share of"
            " the lines read is bad (judged from 1000 bad lines on, and at the end)"
        },
    )
    kafka_config: str = field(
        default="",
        metadata={
            "help": "a properties file (key=value lines) of librdkafka settings for a kafka:// source: security.protocol,"
            " sasl.*, ssl.*, client.id, fetch sizes; secrets go in this file, not on the command line"
        },
    )
    source_pattern: str = field(default="*", metadata={"help": "a folder source reads the files whose names match this glob"})
    source_ignore: str = field(
        default=",".join(DEFAULT_IGNORE),
        metadata={"help": "comma-separated globs of names a folder source never reads (files a producer is still writing)"},
    )
    follow: bool | None = field(
        default=None,
        metadata={
            "help": "keep reading as files grow and new files land; by default a folder and a Kafka topic are followed,"
            " a file and standard input end at their end"
        },
    )
    idle_exit_s: float = field(default=0.0, metadata={"help": "with --follow, stop after this long without data (0: never)"})
    max_samples: int = field(default=0, metadata={"help": "stop after this many samples (0: no limit)"})
    max_line_bytes: int = field(default=1 << 20, metadata={"help": "longer lines are skipped and reported as bad"})
    peek_timeout_s: float = field(
        default=60.0, metadata={"help": "how long to wait for the first data when the field list comes from it"}
    )
    batch_cache: str | None = field(
        default=None,
        metadata={
            "help": "folder for a cache of parsed batches: a re-run over the same files reads them instead of parsing"
            " ('off' or 'none': no cache; ./off for a folder of that name)"
        },
    )
    batch_cache_max_gb: float = field(default=20.0, metadata={"help": "size cap of --batch-cache (least recently used go first)"})

    def ignored_names(self) -> tuple[str, ...]:
        return tuple(g.strip() for g in self.source_ignore.split(",") if g.strip())

    def follows(self) -> bool:
        """--follow, or its default: a folder, an S3 prefix or a topic is followed, a file or a pipe ends."""
        if self.follow is not None:
            return self.follow
        return self.source.startswith(("kafka://", "s3://")) or Path(self.source).is_dir()

    def splits(self) -> bool:
        """The stream splits between workers: by files (a folder, an S3 prefix) or partitions (a topic)."""
        return self.source.startswith(("kafka://", "s3://")) or Path(self.source).is_dir()


@dataclass(frozen=True)
class LearnerSettings:
    """The model trained and how each step updates it."""

    model: str = field(default="lr", metadata={"help": "model type: lr, fm, ffm, wdl or deepfm"})
    k: int = field(default=8, metadata={"help": "embedding size of fm, ffm, wdl and deepfm"})
    hidden: str = field(default="400,400,400", metadata={"help": "MLP hidden layers of wdl and deepfm"})
    update: str = field(
        default="example",
        metadata={"help": "example: per-example optimizer steps on the worker, state deltas pushed; batch: summed gradients"},
    )
    norm: bool = field(
        default=True, metadata={"help": "instance-normalize the pairwise terms of fm, ffm and deepfm (1 / sum x^2)"}
    )
    opt_w: str = field(default="", metadata={"help": "optimizer of table w, e.g. 'ftrl lr=0.5 l1=0.1 l2=1'"})
    opt_v: str = field(default="", metadata={"help": "optimizer of table v (fm, ffm, deepfm), e.g. 'adagrad lr=0.2'"})
    opt_emb: str = field(default="", metadata={"help": "optimizer of table emb (wdl)"})
    opt_bias: str = field(default="", metadata={"help": "optimizer of the dense bias"})
    opt_mlp: str = field(default="", metadata={"help": "optimizer of the dense MLP table, e.g. 'adam lr=0.002'"})
    mlp_step_positives: int = field(
        default=16,
        metadata={
            "help": "wdl and deepfm: the MLP steps once the batches since its last step hold at least this many positive"
            " and this many negative samples (0: after every batch); on a stream with rare positives a batch holds"
            " one or two, too few to step on"
        },
    )
    batch_size: int = field(
        default=0,
        metadata={
            "help": "lines per mini-batch; 0 picks 16384 for lr/fm/ffm with per-example updates (one worker's model does"
            " not depend on it, only the per-batch overhead does) and 256 otherwise"
        },
    )
    seed: int = field(default=0, metadata={"help": "seed of the push compressors' stochastic rounding"})
    device: str = field(
        default="auto",
        metadata={
            "help": "where the MLP of wdl and deepfm trains: cpu, cuda, or auto (times a step on each at start and takes"
            " the faster); lr, fm and ffm train on the CPU"
        },
    )


@dataclass(frozen=True)
class ParallelSettings:
    """Ranks sharing the PS: --workers on this host, or --rank and --world-size across hosts."""

    workers: int = field(
        default=1,
        metadata={
            "help": "ranks to start on this host, one process each, sharing the PS; a folder's files or a topic's"
            " partitions are split between them"
        },
    )
    staleness: int = field(
        default=0,
        metadata={"help": "SSP bound: a worker reuses a pulled row for up to this many of its own batches (0: synchronous)"},
    )
    local_aggregate: bool = field(
        default=False,
        metadata={
            "help": "the --workers ranks sum their sparse pushes for the same keys in shared memory and rank 0 sends"
            " the sums (hierarchical push; needs --workers >= 2)"
        },
    )
    local_aggregate_mb: int = field(default=16, metadata={"help": "shared memory per rank for --local-aggregate, MiB"})
    dense_allreduce: str = field(
        default="auto",
        metadata={
            "help": "how ranks sum the MLP's gradients (wdl, deepfm) each round: exact (float32), or"
            " powersgd[:RANK[:WARMUP_ROUNDS]] (rank-RANK factors of each weight matrix with error feedback, after"
            " WARMUP_ROUNDS exact rounds; 4 and 100 when left out); auto: powersgd on shard processes with"
            " --push-codec auto, else exact (the summary's codecs say which; docs/design/low-rank-sync.md)"
        },
    )
    rank: int = field(default=-1, metadata={"help": "this trainer's rank in a group of --world-size (default: $RANK, else 0)"})
    world_size: int = field(
        default=0,
        metadata={
            "help": "trainer processes, on any hosts, that train one model together, each on its share of the stream"
            " (default: $WORLD_SIZE, else 1)"
        },
    )
    master: str = field(
        default="",
        metadata={"help": "HOST:PORT where the ranks meet, rank 0's (default: $MASTER_ADDR:$MASTER_PORT)"},
    )

    def validate(self, prefix: str = "") -> None:
        if self.workers < 1 or self.staleness < 0:
            raise ConfigError("--workers must be >= 1 and --staleness >= 0")
        if self.local_aggregate and self.workers < 2:
            raise ConfigError(f"--local-aggregate sums several workers' pushes: it needs --workers >= 2, not {self.workers}")
        if self.workers > 1 and (self.rank >= 0 or self.world_size or self.master):
            raise ConfigError(
                f"--workers {self.workers} starts several ranks on this host; --rank, --world-size and --master join"
                " one process to a group across hosts (start one trainer per rank)"
            )
        if self.local_aggregate_mb < 1:
            raise ConfigError(f"--local-aggregate-mb {self.local_aggregate_mb}: must be >= 1")


@dataclass(frozen=True)
class PSAccessSettings:
    """Which shards hold the model, how they are called, what travels, and the checkpoint cuts."""

    ps: str = field(default="local", metadata={"help": "'local' or comma-separated shard addresses"})
    ps_retry_s: float = field(
        default=120.0, metadata={"help": "how long a call to an unreachable PS shard is retried (with backoff) before failing"}
    )
    ps_call_timeout_s: float = field(
        default=60.0,
        metadata={
            "help": "a PS call unanswered this long is retried (reads) or taken as a lost shard (pushes: every shard"
            " goes back to the last checkpoint cut)"
        },
    )
    push_codec: str = field(
        default="auto",
        metadata={
            "help": "sparse push compressor: fp32, fp16, bf16, fp64, int8, epgc8, epgc9, epgc11, onebit, fp32z/fp64z/"
            "bf16z (those values in zstd'd byte planes), topk:RATIO[+CODEC], fp16/bf16/bf16z:rounded (no error"
            " feedback); none: fp64 state deltas, fp32 gradients (uncompressed); auto: none with --ps local; on shard"
            " processes each table starts in bf16z:rounded (each state delta rounded to bf16, nothing held back) and"
            " each rank moves it to onebit when, judged at checkpoint cuts over windows that hold an export, it would"
            " carry at most 60% of bf16z's bytes and its cut drain at most 20% of fp64's, and back over 80% or a"
            " drain over 30%"
            " (the summary's codecs say what it chose)"
        },
    )
    pull_codec: str = field(
        default="auto",
        metadata={
            "help": "sparse pull replies: raw (fp32 weights, fp64 state), fp32, fp16, bf16, int8, epgc8, epgc11...;"
            " auto: raw, except bf16z for several ranks on shard processes (where rows other ranks changed come back)"
        },
    )
    pull_cache: str = field(
        default="auto",
        metadata={
            "help": "keep pulled rows on the worker so a row travels only when it is new to the worker or another"
            " writer changed it (per-example updates; docs/design/pull-cache.md): on, off, or auto (on whenever"
            " shards are reached over gRPC, off in-process and with --local-aggregate)"
        },
    )
    pull_cache_rows: int = field(
        default=1 << 22,
        metadata={
            "help": "rows the pull cache keeps per table (and at most 1 GiB of state); past it the table's cache starts over"
        },
    )
    dense_codec: str = field(
        default="fp32",
        metadata={
            "help": "the MLP of wdl and deepfm: fp32 trains it on the worker (hybrid training; worker processes sync"
            " it through the PS in fp32); onebit-adam[:WARMUP_STEPS] (1-bit Adam) or zeroone-adam[:WARMUP_STEPS] (0/1"
            " Adam) step it on the PS with compressed syncs"
        },
    )
    mlp_moment_bits: str = field(
        default="auto",
        metadata={
            "help": "the mantissa bits the Adam moments of a worker-trained MLP (wdl, deepfm) keep from each"
            " checkpoint cut on: rounded in place before rank 0 writes them, so the cut holds exactly what training"
            " goes on from, in about half the bytes; 1-23 (23: whole); auto: 4 on shard processes with"
            " --push-codec auto, else 23 (the summary's codecs say which; docs/design/moment-bits.md)"
        },
    )
    mlp_weight_bits: str = field(
        default="auto",
        metadata={
            "help": "the mantissa bits the weights of a worker-trained MLP (wdl, deepfm) keep from each checkpoint cut"
            " on: rounded in place on every rank before rank 0 writes them, so the cut holds exactly what training goes"
            " on from; 1-23 (23: whole); auto: 8 on shard processes with --push-codec auto, else 23 (the summary's"
            " codecs say which; docs/design/moment-bits.md)"
        },
    )
    cut_drain_codec: str = field(
        default="auto",
        metadata={
            "help": "what a lossy push codec's held-back residuals travel in at each checkpoint cut: fp64z (exactly:"
            " the shards then hold what uncompressed pushes would have left), bf16z (a quarter of the value bytes;"
            " what it rounds off is forgotten on the worker too, so the cut still holds exactly what training goes"
            " on from) or e8m4z (bf16z with 4 mantissa bits, about a quarter less again); auto: bf16z on shard"
            " processes with --push-codec auto, else fp64z (docs/design/cut-drains.md)"
        },
    )
    residual_rows: int = field(
        default=1 << 20, metadata={"help": "error-feedback memory of lossy push codecs, rows per table (older rows are flushed)"}
    )
    checkpoint_interval_s: float = field(
        default=-1.0,
        metadata={
            "help": "seconds between checkpoint cuts, and one at the stream's end (0: off; -1: auto, 60 where every"
            " shard keeps a data directory, --data-dir or --local-data-dir, else off)"
        },
    )
    from_start: bool = field(
        default=False,
        metadata={
            "help": "ignore what the PS holds: start from empty tables at the start of the stream (by default the"
            " trainer takes every shard back to their newest common checkpoint cut and the stream up from there)"
        },
    )
    replace_model: bool = field(
        default=False,
        metadata={
            "help": "the PS shards hold another model (another name, type or field list): drop it and start this one"
            " (without it such shards refuse this trainer and keep their model)"
        },
    )

    def addresses(self) -> list[str]:
        """--ps as its shard addresses, in shard order (['local'] for in-process shards)."""
        return [a.strip() for a in self.ps.split(",") if a.strip()]


@dataclass(frozen=True)
class ExportSettings:
    """The model versions the trainer writes for the model manager."""

    export_dir: str | None = field(
        default=None, metadata={WRITES: "folder", "help": "folder for model exports; none disables them"}
    )
    model_name: str = field(default="ctr", metadata={"help": "model name written in exports"})
    export_interval_s: float = field(default=10.0, metadata={"help": "seconds between delta exports"})
    full_export_every: int = field(default=10, metadata={"help": "every Nth export is a full one (the rest are deltas)"})
    holdout_samples: int = field(
        default=2000,
        metadata={"help": "samples read after each export, saved with it for the model manager's quality gate (0: none)"},
    )
    export_drain: bool = field(
        default=True,
        metadata={
            "help": "before each export, send what a lossy --push-codec's error feedback still holds back, exactly, so the"
            " version served holds every update trained (costs those rows' bytes at each export)"
        },
    )


@dataclass(frozen=True)
class ProgressSettings:
    """What the trainer reports while it runs."""

    window: int = field(default=10000, metadata={"help": "samples in the progressive-metric window"})
    metrics_out: str | None = field(default=None, metadata={WRITES: "file", "help": "write final metrics JSON here"})
    curve_out: str | None = field(
        default=None,
        metadata={
            WRITES: "file",
            "help": "append the progressive metrics here as JSON lines at every progress record (boundless report)",
        },
    )
    progress_interval_s: float = field(
        default=5.0, metadata={"help": "seconds between progress records: the log line, the AUC gauges, --curve-out"}
    )


@dataclass(frozen=True)
class LocalShardSettings:
    """The in-process shards of --ps local (flags --local-*): how many, their RocksDB folder,
    and the row lifecycle a shard process takes as boundless ps --admit-after..."""

    shards: int = field(default=1, metadata={"help": "in-process shards with --ps local"})
    data_dir: str | None = field(
        default=None,
        metadata={WRITES: "folder", "help": "with --ps local: RocksDB folder of the in-process shards, for checkpoints"},
    )
    lifecycle: RowLifecycleSettings = section(RowLifecycleSettings, "")

    def validate(self, prefix: str = "") -> None:
        if self.shards < 1:
            raise ConfigError(f"--{prefix.replace('_', '-')}shards {self.shards}: must be >= 1")


@dataclass(frozen=True)
class TrainerConfig(ServerConfig):
    """The trainer daemon's settings, a section per part; flags, environment variables and
    YAML keys are the sections' flat names (ctr.runtime.config)."""

    input: InputSettings = section(InputSettings, "input")
    learner: LearnerSettings = section(LearnerSettings, "model and training")
    parallel: ParallelSettings = section(ParallelSettings, "workers")
    ps_access: PSAccessSettings = section(PSAccessSettings, "parameter server")
    local_ps: LocalShardSettings = section(LocalShardSettings, "in-process shards (--ps local)", prefix="local_")
    export: ExportSettings = section(ExportSettings, "export")
    progress: ProgressSettings = section(ProgressSettings, "progress")
    # the server settings (ctr.runtime.server_config): the trainer serves health only, and only
    # when asked (the chart sets a port), so a plain run starts without loading gRPC
    port: int = field(default=-1, metadata={"help": "gRPC port of the health service (-1: none; 0 picks a free one)"})
    grpc_threads: int = field(default=1, metadata={"help": "threads that answer health checks"})
    max_concurrent: int = field(default=4, metadata={"help": "health calls in flight at once"})

    @property
    def local(self) -> bool:
        return self.ps_access.ps == "local"

    def validate(self) -> None:
        super().validate()
        every = self.ps_access.checkpoint_interval_s
        if every < 0 and every != -1:
            raise ConfigError(f"--checkpoint-interval-s {every:g}: seconds (0: off), or -1 (auto)")
        if self.input.kafka_config and not self.input.source.startswith("kafka://"):
            raise ConfigError(f"--kafka-config {self.input.kafka_config}: only a kafka:// --source takes it")
        if self.parallel.workers > 1 and not self.input.splits():
            raise ConfigError(
                f"--workers {self.parallel.workers}: the stream is split by files or partitions,"
                " so --source must be a folder or a Kafka topic"
            )
        if not self.local and (self.local_ps.lifecycle != RowLifecycleSettings() or self.local_ps.data_dir):
            raise ConfigError(
                "--local-admit-after, --local-bloom-mb, --local-ttl-*, --local-max-rows and --local-data-dir are for"
                " --ps local; shard processes take them as boundless ps --admit-after, --bloom-mb, --ttl-s,"
                " --ttl-updates, --max-rows, --data-dir"
            )
