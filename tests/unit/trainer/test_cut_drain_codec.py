"""--cut-drain-codec: what `auto` sends a cut's residuals in, and what the trainer refuses
(docs/design/cut-drains.md)."""

from __future__ import annotations

import pytest

from boundless.cli import build_parser
from ctr.runtime import config as cfg
from ctr.runtime.config import ConfigError
from trainer.config import ENV_PREFIX, TrainerConfig
from trainer.daemon import AUTO_CUT_DRAIN_CODEC, check_codecs, cut_drain_codec


def _conf(*flags: str) -> TrainerConfig:
    args = build_parser("train").parse_args(["train", "--source", "stream.libfm", *flags])
    return cfg.build(TrainerConfig, ENV_PREFIX, args)


@pytest.mark.parametrize(
    ("flags", "remote", "codec"),
    [
        ((), True, AUTO_CUT_DRAIN_CODEC),  # shard processes, pushes that compress: bf16z
        ((), False, "fp64z"),  # in-process shards: nothing is held back, nothing rounded
        (("--push-codec", "onebit"), True, "fp64z"),  # a codec the user named keeps its exact cuts
        (("--cut-drain-codec", "bf16z", "--push-codec", "onebit"), True, "bf16z"),
        (("--cut-drain-codec", "fp64z"), True, "fp64z"),
        (("--cut-drain-codec", "e8m4z"), True, "e8m4z"),
    ],
)
def test_auto_rounds_cut_drains_only_where_auto_compresses_over_a_network(flags, remote, codec):
    conf = _conf(*flags)
    check_codecs(conf)
    assert cut_drain_codec(conf, remote) == codec


@pytest.mark.parametrize("value", ["fp64", "bf16", "onebit", "exact"])
def test_a_cut_drain_codec_that_is_not_offered_is_refused(value):
    with pytest.raises(ConfigError, match=f"--cut-drain-codec '{value}'"):
        check_codecs(_conf("--cut-drain-codec", value))
