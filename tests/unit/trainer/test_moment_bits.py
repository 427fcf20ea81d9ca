"""--mlp-moment-bits and --mlp-weight-bits: what `auto` rounds the MLP's Adam moments and
weights to at cuts, and what the trainer refuses (docs/design/moment-bits.md)."""

from __future__ import annotations

import pytest

from boundless.cli import build_parser
from ctr.runtime import config as cfg
from ctr.runtime.config import ConfigError
from trainer.config import ENV_PREFIX, TrainerConfig
from trainer.daemon import AUTO_MOMENT_BITS, AUTO_WEIGHT_BITS, check_codecs, moment_bits, weight_bits


def _conf(*flags: str) -> TrainerConfig:
    args = build_parser("train").parse_args(["train", "--source", "stream.libfm", *flags])
    return cfg.build(TrainerConfig, ENV_PREFIX, args)


@pytest.mark.parametrize(
    ("flags", "remote", "bits"),
    [
        ((), True, AUTO_MOMENT_BITS),  # shard processes, pushes that compress: the cut writes do too
        ((), False, 23),  # in-process shards: nothing travels, nothing is rounded
        (("--push-codec", "none"), True, 23),  # the uncompressed protocol keeps every bit
        (("--push-codec", "onebit"), True, 23),  # a codec the user named is for the sparse rows only
        (("--mlp-moment-bits", "7"), False, 7),
        (("--mlp-moment-bits", "23", "--push-codec", "auto"), True, 23),
    ],
)
def test_auto_rounds_the_moments_only_where_the_cut_writes_compress(flags, remote, bits):
    conf = _conf(*flags)
    check_codecs(conf)
    assert moment_bits(conf, remote) == bits


@pytest.mark.parametrize(
    ("flags", "remote", "bits"),
    [
        ((), True, AUTO_WEIGHT_BITS),
        ((), False, 23),
        (("--push-codec", "none"), True, 23),
        (("--push-codec", "onebit"), True, 23),
        (("--mlp-weight-bits", "12"), False, 12),
        (("--mlp-weight-bits", "23"), True, 23),
        (("--mlp-moment-bits", "23"), True, AUTO_WEIGHT_BITS),  # the two widths are set apart
    ],
)
def test_auto_rounds_the_weights_only_where_the_cut_writes_compress(flags, remote, bits):
    conf = _conf(*flags)
    check_codecs(conf)
    assert weight_bits(conf, remote) == bits


@pytest.mark.parametrize("flag", ["--mlp-moment-bits", "--mlp-weight-bits"])
@pytest.mark.parametrize("value", ["24", "0", "-1", "4.5", "half"])
def test_a_width_a_float32_cannot_have_is_refused(flag, value):
    with pytest.raises(ConfigError, match=f"{flag} '{value}'"):
        check_codecs(_conf(flag, value))
