"""ModelSpec: what a model is (type, embedding size, fields, hidden layers, an optimizer per
table) and the PS tables it needs. A model never knows how its tables are sharded.

    lr      w[1]                    + bias
    fm      w[1], v[k]              + bias
    ffm     w[1], v[F*k]            + bias     (one k-vector per field per key)
    wdl     w[1], emb[k]            + bias, mlp[P]   (wide LR + MLP over field embeddings)
    deepfm  w[1], v[k]              + bias, mlp[P]   (v is shared by the FM and the MLP)

Sparse tables are keyed by feature key; `bias` and `mlp` are dense, `mlp` holding the
MLP's parameters flattened in `mlp_shapes()` order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ctr.model.family import ModelFamily
from ctr.model.optim import OptimizerError, OptimizerSpec
from ctr.model.registry import FAMILIES, MODEL_TYPES

FIELD_MODELS = tuple(t for t, f in FAMILIES.items() if f.needs_fields)  # size tables or layers by the field count
UPDATES = ("example", "batch")


class ModelSpecError(ValueError):
    """A model setting that cannot work, named."""


@dataclass(frozen=True)
class TableSpec:
    name: str
    kind: str  # "sparse" | "dense"
    dim: int  # weights per row (sparse) or the whole vector's length (dense)
    optimizer: OptimizerSpec
    update: str  # "example": per-example steps on the worker, state delta pushed; "batch": gradient pushed

    @property
    def width(self) -> int:
        """float64 state values per row (sparse) or per element (dense, dim 1)."""
        return self.optimizer.state_width(self.dim if self.kind == "sparse" else 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "dim": self.dim,
            "update": self.update,
            "optimizer": self.optimizer.to_dict(),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TableSpec:
        name = str(d.get("name", ""))
        kind = str(d.get("kind", ""))
        if not name or kind not in ("sparse", "dense"):
            raise ModelSpecError(f"table {name!r}: kind {kind!r} is not sparse or dense")
        try:
            dim = int(d.get("dim", 0))
        except (TypeError, ValueError):
            raise ModelSpecError(f"table {name}: dim {d.get('dim')!r} is not an integer") from None
        if dim < 1:
            raise ModelSpecError(f"table {name}: dim must be >= 1, got {dim}")
        update = str(d.get("update", "example"))
        if update not in UPDATES:
            raise ModelSpecError(f"table {name}: update {update!r} is not one of {', '.join(UPDATES)}")
        try:
            opt = OptimizerSpec.from_dict(dict(d.get("optimizer") or {}), f"table {name}: optimizer")
        except OptimizerError as e:
            raise ModelSpecError(str(e)) from None
        return cls(name, kind, dim, opt, update)


DEFAULT_OPTIMIZERS: dict[str, OptimizerSpec] = {
    "w": OptimizerSpec("ftrl", lr=0.2, beta=1.0, l1=0.1, l2=1.0),
    "v": OptimizerSpec("adagrad", lr=0.5, initial_accumulator=0.1, init_std=0.1, l2=1e-5),
    "emb": OptimizerSpec("adagrad", lr=0.2, initial_accumulator=0.1, init_std=0.1, l2=1e-5),
    "bias": OptimizerSpec("ftrl", lr=0.5, beta=1.0),
    "mlp": OptimizerSpec("adam", lr=0.005),
}
# where one model's table wants other defaults: ffm's pairwise term spreads each example's
# gradient over F-1 field vectors per key (measured in docs/benchmarks.md). LR's weights are
# its whole model and take larger steps: next to embeddings that also learn each feature's
# own effect, alpha 0.5 overshoots (docs/design/linear-step.md). The MLPs of wdl and deepfm
# take smaller Adam steps than 0.005, measured over neighbouring rates, and an eps of 1e-5:
# where the loss nears zero, Adam's 1e-8 turns gradients of 1e-7 into whole steps, the
# tower drifts and the loss spikes (docs/design/mlp-step.md). Wide&Deep's wide part takes
# smaller steps still (alpha 0.15): its embeddings feed an MLP, not a pairwise term, and
# on Criteo 10k alpha 0.2 left it below TorchRec's (docs/design/linear-step.md). Their
# steps' mean gradients are clipped to norm 1: with row admission on, DeepFM's MLP on Avazu
# 10k saw its gradient grow 60-fold and ended worse than a constant; on the tuning data
# no step reaches it (docs/design/mlp-step.md)
MLP_EPS = 1e-5
MLP_CLIP_NORM = 1.0
MODEL_DEFAULTS: dict[tuple[str, str], OptimizerSpec] = {
    ("lr", "w"): OptimizerSpec("ftrl", lr=0.5, beta=1.0, l1=0.1, l2=1.0),
    ("wdl", "w"): OptimizerSpec("ftrl", lr=0.15, beta=1.0, l1=0.1, l2=1.0),
    ("ffm", "v"): OptimizerSpec("adagrad", lr=1.0, initial_accumulator=0.1, init_std=0.1, l2=1e-5),
    ("wdl", "mlp"): OptimizerSpec("adam", lr=0.002, eps=MLP_EPS, clip_norm=MLP_CLIP_NORM),
    ("deepfm", "mlp"): OptimizerSpec("adam", lr=0.003, eps=MLP_EPS, clip_norm=MLP_CLIP_NORM),
}


@dataclass(frozen=True)
class ModelSpec:
    type: str = "lr"
    k: int = 8
    fields: tuple[str, ...] = ()
    hidden: tuple[int, ...] = (400, 400, 400)
    optimizers: tuple[tuple[str, OptimizerSpec], ...] = ()  # per-table overrides of DEFAULT_OPTIMIZERS
    update: str = "example"
    norm: bool = True  # scale the pairwise terms of fm, ffm and deepfm by 1 / sum x^2 (libffm's r)

    def __post_init__(self) -> None:
        if self.type not in MODEL_TYPES:
            raise ModelSpecError(f"model.type: unknown model {self.type!r}; expected one of {', '.join(MODEL_TYPES)}")
        if self.k < 1:
            raise ModelSpecError(f"model.k: the embedding size must be >= 1, got {self.k}")
        if any(h < 1 for h in self.hidden):
            raise ModelSpecError(f"model.hidden: every layer needs >= 1 unit, got {list(self.hidden)}")
        if self.update not in UPDATES:
            raise ModelSpecError(f"model.update: {self.update!r} is not one of {', '.join(UPDATES)}")
        if len(set(self.fields)) != len(self.fields):
            raise ModelSpecError("model.fields: field names repeat")
        if self.needs_fields and not self.fields:
            raise ModelSpecError(f"model.fields: a {self.type} model needs the schema's field list")
        names = {t for t, _ in self.optimizers}
        clipped = sorted(t for t, o in self.optimizers if o.clip_norm > 0 and t != "mlp")
        if clipped:
            raise ModelSpecError(f"model.optimizers: clip_norm is the MLP's (table mlp), not table {clipped[0]}'s")
        unknown = names - set(self.table_names())
        if unknown:
            raise ModelSpecError(
                f"model.optimizers: no table {sorted(unknown)} in a {self.type} model; it has {self.table_names()}"
            )

    @property
    def family(self) -> ModelFamily:
        """What this model type is to the trainer, serving and the router (ctr.model.registry)."""
        return FAMILIES[self.type]

    @property
    def needs_fields(self) -> bool:
        return self.family.needs_fields

    @property
    def is_dnn(self) -> bool:
        return self.family.has_mlp

    @property
    def field_count(self) -> int:
        return len(self.fields)

    def table_names(self) -> list[str]:
        names = [name for name, _ in self.family.sparse_tables(self)]
        names.append("bias")
        if self.is_dnn:
            names.append("mlp")
        return names

    @property
    def pair_norm(self) -> bool:
        """Whether the pairwise term is instance-normalized (it has one: fm, ffm, deepfm)."""
        return self.norm and self.family.pairwise

    def embedding_table(self) -> str | None:
        return self.family.embedding

    def optimizer(self, table: str) -> OptimizerSpec:
        default = MODEL_DEFAULTS.get((self.type, table), DEFAULT_OPTIMIZERS[table])
        return dict(self.optimizers).get(table, default)

    def mlp_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """(name, shape) of each MLP parameter, in the order the dense table holds them."""
        if not self.is_dnn:
            return []
        out: list[tuple[str, tuple[int, ...]]] = []
        width = self.field_count * self.k
        for i, h in enumerate((*self.hidden, 1)):
            out += [(f"mlp.{i}.weight", (h, width)), (f"mlp.{i}.bias", (h,))]
            width = h
        return out

    def tables(self) -> list[TableSpec]:
        out = []
        sparse = dict(self.family.sparse_tables(self))
        for name in self.table_names():
            opt = self.optimizer(name)
            if name == "bias":
                out.append(TableSpec(name, "dense", 1, opt, self.update))
            elif name == "mlp":
                size = sum(_prod(s) for _, s in self.mlp_shapes())
                out.append(TableSpec(name, "dense", size, opt, "batch"))  # the MLP steps per batch
            else:
                out.append(TableSpec(name, "sparse", sparse[name], opt, self.update))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "k": self.k,
            "fields": list(self.fields),
            "hidden": list(self.hidden),
            "update": self.update,
            "norm": self.norm,
            "optimizers": {t: self.optimizer(t).to_dict() for t in self.table_names()},
            "tables": [{"name": t.name, "kind": t.kind, "dim": t.dim, "update": t.update} for t in self.tables()],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelSpec:
        """From a manifest's `model` section (its `name` and `tables` are derived, and passed
        over) or a YAML `model:` section; every error names its setting."""
        if not isinstance(d, dict):
            raise ModelSpecError(f"model: expected a mapping, got {type(d).__name__}")
        known = {"name", "type", "k", "fields", "hidden", "update", "norm", "optimizers", "tables"}
        unknown = set(d) - known
        if unknown:
            raise ModelSpecError(f"model: unknown settings {sorted(unknown)}")
        opts = d.get("optimizers") or {}
        if not isinstance(opts, dict):
            raise ModelSpecError("model.optimizers: expected a mapping of table -> settings")
        try:
            parsed = tuple((str(t), OptimizerSpec.from_dict(dict(o), f"model.optimizers.{t}")) for t, o in opts.items())
            return cls(
                type=str(d.get("type", "lr")),
                k=int(d.get("k", 8)),
                fields=tuple(str(f) for f in d.get("fields") or ()),
                hidden=tuple(int(h) for h in d.get("hidden") or ()),
                optimizers=parsed,
                update=str(d.get("update", "example")),
                norm=bool(d.get("norm", True)),
            )
        except (OptimizerError, TypeError) as e:
            raise ModelSpecError(str(e)) from None

    def with_fields(self, names: tuple[str, ...]) -> ModelSpec:
        return replace(self, fields=names)

    def with_optimizer(self, table: str, opt: OptimizerSpec) -> ModelSpec:
        rest = tuple((t, o) for t, o in self.optimizers if t != table)
        return replace(self, optimizers=(*rest, (table, opt)))


def _prod(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def parse_hidden(text: str) -> tuple[int, ...]:
    """`400,400,400` -> (400, 400, 400); empty text means no hidden layer."""
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ModelSpecError(f"--hidden: {text!r} is not a comma-separated list of layer sizes") from None
