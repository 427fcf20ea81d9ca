"""Model-manager daemon configuration."""

from __future__ import annotations

from dataclasses import dataclass, field

from ctr.repository.holdout import JUDGED_FROM
from ctr.runtime.config import WRITES, ConfigError
from ctr.runtime.server_config import ServerConfig

HELP_GROUPS: dict[str, tuple[str, ...]] = {
    "essential": ("exports", "repo", "model_name", "notify", "host", "port", "metrics_port"),
    "quality gate": (
        "min_samples", "max_auc_drop", "min_auc", "max_logloss", "calibration_low", "calibration_high",
        "rollback_auc_drop", "rollback_z", "accept_new_spec",
    ),
    "retention": ("compact_after", "keep_full", "keep_exports", "keep_rejections"),
}  # fmt: skip
HELP_EXAMPLES = """\
  boundless model watch --exports exports --repo repo --notify 127.0.0.1:7100
      publish the trainer's exports into repo/ctr and tell serving at once
  boundless model watch --exports /shared/exports --repo s3://models --model-name criteo --min-samples 5000
      another model, into S3, judged on at least 5,000 unseen samples
"""


@dataclass(frozen=True)
class ModelMgrConfig(ServerConfig):
    exports: str = field(default="exports", metadata={WRITES: "folder", "help": "folder the trainer exports into"})
    repo: str = field(default="repo", metadata={WRITES: "folder", "help": "model repository folder"})
    model_name: str = field(default="ctr", metadata={"help": "the name of the model this manager publishes"})
    poll_s: float = field(default=0.2, metadata={"help": "seconds between scans of the exports"})
    accept_new_spec: bool = field(
        default=False,
        metadata={
            "help": "publish an export whose model type or field list differs from the live version's (by default it is"
            " refused: another model's export in the same folder must not replace this one)"
        },
    )
    min_samples: int = field(default=JUDGED_FROM, metadata={"help": "quality gate: holdout samples needed to judge an export"})
    max_auc_drop: float = field(
        default=0.02, metadata={"help": "quality gate: how far the candidate's holdout AUC may trail the live version's"}
    )
    min_auc: float = field(default=0.5, metadata={"help": "quality gate: lowest holdout AUC"})
    max_logloss: float = field(default=1.0, metadata={"help": "quality gate: highest holdout logloss"})
    calibration_low: float = field(default=0.5, metadata={"help": "quality gate: lowest mean prediction / CTR"})
    calibration_high: float = field(default=2.0, metadata={"help": "quality gate: highest mean prediction / CTR"})
    rollback_auc_drop: float = field(
        default=0.01,
        metadata={
            "help": "auto-rollback: the live version's holdout AUC trailing its predecessor's by more pins the predecessor"
        },
    )
    rollback_z: float = field(
        default=3.0,
        metadata={
            "help": "auto-rollback: ... and only if that drop is also this many standard errors of the paired AUC"
            " difference on the holdout (DeLong): a small holdout's noise never pins serving (0: the drop alone)"
        },
    )
    compact_after: int = field(
        default=20, metadata={"help": "a delta chain this long is folded into a new full version (0: never)"}
    )
    keep_exports: int = field(
        default=100,
        metadata={"help": "retention: handled export folders kept, the newest (0: keep all; unhandled ones always stay)"},
    )
    keep_rejections: int = field(
        default=1000, metadata={"help": "retention: rejection records kept in the repository, the newest (0: keep all)"}
    )
    keep_full: int = field(default=3, metadata={"help": "retention: full versions kept with their delta chains (0: keep all)"})
    writer_lease_s: float = field(
        default=30.0,
        metadata={
            "help": "an S3 repository: the term of the model's writer lease there (renewed every third of it; another host's"
            " manager takes over a lease unrenewed for a term, and is refused one that is renewed)"
        },
    )
    notify: str = field(
        default="",
        metadata={"help": "serving replicas (host:port,...) told at once when a version is published or rolled back"},
    )

    def __post_init__(self) -> None:
        if not self.writer_lease_s > 0:
            raise ConfigError(f"--writer-lease-s {self.writer_lease_s}: must be > 0")
