"""Builds the run's ModelSpec from the trainer config; every error names its flag."""

from __future__ import annotations

from ctr.model.optim import OptimizerError, OptimizerSpec
from ctr.model.spec import MODEL_TYPES, ModelSpec, ModelSpecError, parse_hidden
from ctr.runtime.config import ConfigError
from trainer.config import TrainerConfig

TABLE_FLAGS = {"w": "opt_w", "v": "opt_v", "emb": "opt_emb", "bias": "opt_bias", "mlp": "opt_mlp"}


def parse_optimizer(text: str, base: OptimizerSpec, flag: str) -> OptimizerSpec:
    """'KIND key=value ...' (KIND optional) over the table's default optimizer."""
    settings = base.to_dict()
    for i, part in enumerate(text.split()):
        if "=" not in part:
            if i:
                raise ConfigError(f"{flag}: {part!r} is not key=value")
            settings["kind"] = part
            continue
        key, _, value = part.partition("=")
        settings[key.replace("-", "_")] = value
    try:
        return OptimizerSpec.from_dict(settings, flag)
    except OptimizerError as e:
        raise ConfigError(str(e)) from None


def model_spec(conf: TrainerConfig, fields: tuple[str, ...]) -> ModelSpec:
    if conf.learner.model not in MODEL_TYPES:
        raise ConfigError(f"--model: unknown model {conf.learner.model!r}; expected one of {', '.join(MODEL_TYPES)}")
    try:
        hidden = parse_hidden(conf.learner.hidden)
        spec = ModelSpec(
            type=conf.learner.model,
            k=conf.learner.k,
            fields=fields,
            hidden=hidden,
            update=conf.learner.update,
            norm=conf.learner.norm,
        )
    except ModelSpecError as e:
        raise ConfigError(str(e).replace("model.", "--", 1).replace("--type", "--model")) from None
    for table, attr in TABLE_FLAGS.items():
        text = getattr(conf.learner, attr)
        if not text:
            continue
        flag = "--" + attr.replace("_", "-")
        if table not in spec.table_names():
            raise ConfigError(f"{flag}: a {conf.learner.model} model has no table {table!r}; its tables are {spec.table_names()}")
        try:
            spec = spec.with_optimizer(table, parse_optimizer(text, spec.optimizer(table), flag))
        except ModelSpecError as e:
            raise ConfigError(f"{flag}: {e}".replace("model.optimizers: ", "")) from None
    return spec
