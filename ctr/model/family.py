"""What a model family is to the rest of the platform: its tables, how serving scores it and
how sharded serving splits it. The trainer, serving and the router ask the family (found by
`spec.family`, ctr.model.registry) instead of comparing `spec.type` with strings; adding a
model is one module here that defines its family, its kernels and their references."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from ctr.model.spec import ModelSpec

F32 = npt.NDArray[np.float32]
I64 = npt.NDArray[np.int64]
ItemKernel = Callable[[I64, int], F32]  # (item offsets of a range, its first item) -> the range's scores


class Request(Protocol):
    """A decoded ranking request: features index its dictionary of keys (serving.request)."""

    @property
    def keys(self) -> npt.NDArray[np.uint64]: ...

    @property
    def context(self) -> I64: ...

    @property
    def item_offsets(self) -> I64: ...

    @property
    def item_indices(self) -> I64: ...

    @property
    def values(self) -> F32: ...

    @property
    def fields(self) -> npt.NDArray[np.int32]: ...


class Scorable(Protocol):
    """What a family's scoring needs of a servable version (serving.loading.servable)."""

    spec: ModelSpec
    columns: dict[str, tuple[int, int]]  # table -> (first column, width) in a looked-up row
    net: Any  # the MLP scorer of the DNN families

    @property
    def bias(self) -> float: ...

    @property
    def locates_in_place(self) -> bool: ...

    def rows(self, keys: npt.NDArray[np.uint64]) -> F32: ...

    def locate(self, keys: npt.NDArray[np.uint64]) -> Any: ...

    def per_items(self, req: Request, work_per_feature: int, kernel: ItemKernel) -> F32: ...


class ModelFamily:
    """One model type. Subclasses set the class attributes and implement `score`."""

    name = ""
    needs_fields = False  # its tables or layers are sized by the field list
    has_mlp = False  # a dense MLP on top (the DNN families; torch loads only for them)
    pairwise = False  # it has a pairwise term, which instance normalization scales
    embedding: str | None = None  # the sparse table of factor vectors, if any
    partial_sums = False  # sharded serving adds shards' partial sums (Partial); else shards send rows (Lookup)
    # its scoring reads wide rows item by item: whoever looks a request's rows up (the
    # servable version, a router) renumbers the request so that they come in the order its
    # items read them (ctr.model.first_use)
    first_use = False
    train_code = -1  # its code in the LR/FM/FFM training kernel (ctr.model.factorization); -1: the DNN kernel

    def sparse_tables(self, spec: ModelSpec) -> list[tuple[str, int]]:
        """(name, dim) of each sparse table, in the order the shards and files hold them."""
        return [("w", 1)]

    def score(self, model: Scorable, req: Request, rows: F32 | None) -> F32:
        """The request's item scores; `rows` are its dictionary's looked-up rows when a router
        fetched them from the serving shards, else None (the model looks them up)."""
        raise NotImplementedError

    def partial_factors(self, spec: ModelSpec) -> int:
        """Factors in a shard's partial sums (ctr.model.partial_sums): 0 for LR, k for FM."""
        raise ValueError(f"a {self.name} model is not split by partial sums")

    def __repr__(self) -> str:
        return f"<model family {self.name}>"
