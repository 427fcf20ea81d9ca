"""The JSON files of exports and of the repository, as pydantic models: every file is
validated when read, and a bad one is refused with the field that is wrong, never half
trusted (a list where an object belongs, a file name with a slash, metrics as a string)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

FILE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,200}$"  # no folders, no hidden files
SHA256 = r"^[0-9a-f]{64}$"


class SchemaError(ValueError):
    """A JSON file that does not match its schema, naming the file and the field."""


class ExportedFileEntry(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str = Field(pattern=FILE_NAME)
    table: str
    role: Literal["sparse_full", "sparse_delta", "dense"]
    size: int = Field(ge=0)
    sha256: str = Field(pattern=SHA256)
    rows: int = Field(ge=0)
    columns: str = ""
    shard: int | None = Field(default=None, ge=0)  # the PS shard of a sparse file


Metrics = dict[str, float | None]


class HoldoutEntry(BaseModel):
    """An export's holdout file: `samples` of them, the first `seen` of which the exported
    model did train on (the stream ended before enough new ones came)."""

    model_config = ConfigDict(extra="ignore")
    name: str = Field(pattern=FILE_NAME)
    size: int = Field(ge=0)
    sha256: str = Field(pattern=SHA256)
    samples: int = Field(ge=0)
    seen: int = Field(default=0, ge=0)


class ExportManifest(BaseModel):
    """export.json, written by the trainer's exporter."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    id: str = Field(pattern=FILE_NAME)
    kind: Literal["full", "delta"]
    base: str | None = None
    previous: str | None = None
    model: dict[str, Any]
    feature_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    files: list[ExportedFileEntry] = Field(min_length=1)
    shard_count: int = Field(ge=1, le=4096)
    shard_seqs: list[int] = []
    metrics: Metrics = {}
    created: float
    holdout: HoldoutEntry | None = None  # samples the exported model has not trained on

    @model_validator(mode="after")
    def _lineage(self) -> ExportManifest:
        if self.kind == "delta" and not (self.base and self.previous):
            raise ValueError("a delta export names its base and previous exports")
        names = [f.name for f in self.files]
        if len(set(names)) != len(names):
            raise ValueError("files: a name is listed twice")
        for f in self.files:
            if f.role != "dense" and f.shard is not None and f.shard >= self.shard_count:
                raise ValueError(f"files: {f.name} is shard {f.shard} of {self.shard_count}")
        return self

    @field_validator("metrics")
    @classmethod
    def _finite_or_null(cls, v: Metrics) -> Metrics:
        return {k: (x if x is None or math.isfinite(x) else None) for k, x in v.items()}


class ChainLink(BaseModel):
    """A delta version's predecessor, with the checksum of its manifest."""

    version: int = Field(ge=1)
    manifest_sha256: str = Field(pattern=SHA256)


class VersionManifest(BaseModel):
    """manifest.json of a published version."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    model: str
    version: int = Field(ge=1)
    kind: Literal["full", "delta"]
    base_version: int = Field(ge=1)
    delta_chain: list[int] = []
    base: ChainLink | None = None  # a delta's full version
    previous: ChainLink | None = None  # a delta's predecessor (its base, or the delta before)
    export_id: str
    spec: dict[str, Any]
    feature_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    shard_count: int = Field(ge=1, le=4096)
    files: list[ExportedFileEntry] = Field(min_length=1)
    metrics: Metrics = {}
    evaluation: dict[str, Any] = {}  # the quality gate's evidence
    lineage_base_export: str = ""  # the trainer's full export the lineage started from
    compacts: list[int] = []  # a compacted full version: the chain it folds (base first)
    created: float

    @model_validator(mode="after")
    def _chain(self) -> VersionManifest:
        if self.kind == "full" and (self.delta_chain or self.base_version != self.version):
            raise ValueError("a full version is its own base and has no delta chain")
        if self.kind == "delta":
            if not self.delta_chain or self.delta_chain[-1] != self.version or self.base_version >= self.version:
                raise ValueError("a delta's chain ends with the delta itself, after its base")
            if self.delta_chain != sorted(set(self.delta_chain)) or self.delta_chain[0] <= self.base_version:
                raise ValueError("delta_chain: versions out of order or repeated")
        return self


class LabelEntry(BaseModel):
    """One version label of ROUTING.json: its version, the share of routed requests it takes
    (by a stable hash of each request's routing key), and the share of live requests it
    scores as a shadow (off the request path, recorded, never answered)."""

    model_config = ConfigDict(extra="forbid")
    version: int = Field(ge=1)
    share: float = Field(default=0.0, ge=0.0, le=1.0)
    shadow: float = Field(default=0.0, ge=0.0, le=1.0)


class RoutingFile(BaseModel):
    """ROUTING.json: version labels beside the policy (whose version is the stable one)."""

    model_config = ConfigDict(extra="ignore")
    labels: dict[str, LabelEntry] = Field(default_factory=dict)
    set_at: float = 0.0


class PolicyFile(BaseModel):
    """POLICY.json: which version serving follows."""

    model_config = ConfigDict(extra="ignore")
    mode: Literal["latest", "pinned"] = "latest"
    version: int | None = Field(default=None, ge=1)
    set_at: float = 0.0
    reason: str = ""

    @model_validator(mode="after")
    def _pinned_has_version(self) -> PolicyFile:
        if self.mode == "pinned" and self.version is None:
            raise ValueError("a pinned policy names its version")
        return self


class CounterFile(BaseModel):
    """COUNTER.json: the next version number (never reused) and the newest export handled."""

    model_config = ConfigDict(extra="ignore")
    next_version: int = Field(default=1, ge=1)
    handled_through: str = ""  # export ids sort by time: every one up to this was handled


M = TypeVar("M", bound=BaseModel)


def parse(model: type[M], raw: bytes | str, where: str) -> M:
    """`raw` JSON as `model`; SchemaError naming `where` and the field otherwise."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as e:
        raise SchemaError(f"{where}: not JSON: {e}") from None
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: a JSON object is needed, not {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "(file)"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise SchemaError(f"{where}: {field}: {first['msg']}{more}") from None


def read(model: type[M], path: Path) -> M:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise SchemaError(f"{path}: unreadable: {e.strerror or e}") from None
    return parse(model, raw, str(path))


def dump(obj: BaseModel) -> dict[str, Any]:
    return obj.model_dump(mode="json", by_alias=True)
