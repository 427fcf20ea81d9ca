import argparse

import pytest

from ctr.model.spec import ModelSpec, ModelSpecError
from ctr.runtime.config import ConfigError
from trainer import daemon as server
from trainer.config import TrainerConfig
from trainer.spec import model_spec


@pytest.mark.parametrize(
    "kwargs,needle",
    [
        ({"type": "svm"}, "model.type"),
        ({"type": "fm", "k": 0}, "model.k"),
        ({"type": "ffm"}, "model.fields"),
        ({"type": "deepfm", "fields": ("a",), "hidden": (0,)}, "model.hidden"),
        ({"type": "lr", "update": "sometimes"}, "model.update"),
    ],
)
def test_bad_specs_name_the_setting(kwargs, needle):
    with pytest.raises(ModelSpecError, match=needle):
        ModelSpec(**kwargs)


def test_tables_of_each_model():
    f = ("a", "b", "c")
    assert [(t.name, t.dim) for t in ModelSpec("ffm", k=4, fields=f).tables()] == [("w", 1), ("v", 12), ("bias", 1)]
    deep = ModelSpec("deepfm", k=4, fields=f, hidden=(8,))
    assert [t.name for t in deep.tables()] == ["w", "v", "bias", "mlp"]
    assert deep.tables()[-1].dim == 12 * 8 + 8 + 8 + 1 and deep.tables()[-1].update == "batch"
    again = ModelSpec.from_dict({"name": "ctr", **deep.to_dict()})  # as a manifest holds it
    assert again.to_dict() == deep.to_dict() and again.tables() == deep.tables()


def _conf(**kw):
    parser = argparse.ArgumentParser(allow_abbrev=False)
    server.add_arguments(parser)
    args = parser.parse_args([f"--{k.replace('_', '-')}={v}" for k, v in kw.items()])
    from ctr.runtime import config as cfg

    return cfg.build(TrainerConfig, "X_", args, environ={})


@pytest.mark.parametrize(
    "kw,needle",
    [
        ({"model": "fm", "k": "0"}, "--k"),
        ({"model": "svm"}, "--model"),
        ({"model": "lr", "opt_v": "adagrad"}, "--opt-v"),
        ({"model": "fm", "opt_v": "rmsprop"}, "--opt-v"),
        ({"model": "fm", "opt_v": "adagrad lr=-1"}, "--opt-v"),
        ({"model": "deepfm", "hidden": "4,x"}, "--hidden"),
        ({"model": "deepfm", "opt_v": "clip_norm=1"}, "--opt-v: clip_norm is the MLP's"),
    ],
)
def test_trainer_flags_that_do_not_fit_fail_naming_the_flag(kw, needle):
    with pytest.raises(ConfigError, match=needle):
        model_spec(_conf(**kw), ("a", "b"))


def test_optimizer_flags_reach_the_spec():
    spec = model_spec(_conf(model="fm", opt_v="adam lr=0.01", opt_w="l1=0.5"), ())
    assert spec.optimizer("v").kind == "adam" and spec.optimizer("v").lr == 0.01
    assert spec.optimizer("w").kind == "ftrl" and spec.optimizer("w").l1 == 0.5
