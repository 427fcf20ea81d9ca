"""The model families by `spec.type`: the one place that lists them."""

from __future__ import annotations

from ctr.model.dnn import DEEPFM, WDL
from ctr.model.family import ModelFamily
from ctr.model.ffm import FFM
from ctr.model.fm import FM
from ctr.model.lr import LR

FAMILIES: dict[str, ModelFamily] = {f.name: f for f in (LR, FM, FFM, WDL, DEEPFM)}
MODEL_TYPES = tuple(FAMILIES)


def family(model_type: str) -> ModelFamily:
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise ValueError(f"model.type: unknown model {model_type!r}; expected one of {', '.join(MODEL_TYPES)}") from None
