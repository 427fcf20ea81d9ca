"""The model families behind the registry: the table layout each one declares (the contract
of the shards and of the model files), how sharded serving splits it, and that nothing outside
ctr.model picks a family by comparing `spec.type` with strings."""

import ast
from pathlib import Path

import pytest

from ctr.model.registry import FAMILIES, MODEL_TYPES, family
from ctr.model.spec import ModelSpec

ROOT = Path(__file__).resolve().parents[4]
FIELDS = ("a", "b", "c")


@pytest.mark.parametrize(
    ("model", "tables"),
    [
        ("lr", [("w", "sparse", 1), ("bias", "dense", 1)]),
        ("fm", [("w", "sparse", 1), ("v", "sparse", 4), ("bias", "dense", 1)]),
        ("ffm", [("w", "sparse", 1), ("v", "sparse", 12), ("bias", "dense", 1)]),
        ("wdl", [("w", "sparse", 1), ("emb", "sparse", 4), ("bias", "dense", 1), ("mlp", "dense", 12 * 2 + 2 + 2 + 1)]),
        ("deepfm", [("w", "sparse", 1), ("v", "sparse", 4), ("bias", "dense", 1), ("mlp", "dense", 12 * 2 + 2 + 2 + 1)]),
    ],
)
def test_each_family_declares_its_tables_in_file_order(model, tables):
    spec = ModelSpec(model, k=4, fields=FIELDS, hidden=(2,))
    assert [(t.name, t.kind, t.dim) for t in spec.tables()] == tables
    assert spec.family is family(model) and spec.family.name == model


def test_the_registry_lists_every_family_once():
    assert MODEL_TYPES == ("lr", "fm", "ffm", "wdl", "deepfm")
    assert all(FAMILIES[name].name == name for name in MODEL_TYPES)
    with pytest.raises(ValueError, match="unknown model 'xgb'"):
        family("xgb")


def test_only_lr_and_fm_are_served_by_partial_sums():
    spec = {t: ModelSpec(t, k=4, fields=FIELDS) for t in MODEL_TYPES}
    assert [t for t in MODEL_TYPES if family(t).partial_sums] == ["lr", "fm"]
    assert family("lr").partial_factors(spec["lr"]) == 0
    assert family("fm").partial_factors(spec["fm"]) == 4
    with pytest.raises(ValueError, match="not split by partial sums"):
        family("ffm").partial_factors(spec["ffm"])


def test_field_models_and_pairwise_terms():
    assert [t for t in MODEL_TYPES if family(t).needs_fields] == ["ffm", "wdl", "deepfm"]
    assert [t for t in MODEL_TYPES if ModelSpec(t, fields=FIELDS).pair_norm] == ["fm", "ffm", "deepfm"]
    assert [t for t in MODEL_TYPES if ModelSpec(t, fields=FIELDS).is_dnn] == ["wdl", "deepfm"]


def _type_comparisons(path: Path) -> list[str]:
    """`x.type == "..."`, `x.type in (...)` and the like, where x names a spec or a model."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Attribute) and side.attr == "type" and "spec" in ast.unparse(side.value):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_family_is_picked_by_its_type_name_outside_the_model_package():
    product = [p for pkg in ("trainer", "ps", "serving", "modelmgr", "boundless") for p in (ROOT / pkg).rglob("*.py")]
    assert ROOT.joinpath("serving/loading/servable.py") in product
    offenders = [hit for path in product for hit in _type_comparisons(path)]
    assert not offenders, offenders
