import numpy as np
import pytest

from boundless.synthetic import SyntheticSpec, SyntheticStream
from ctr.data.fields import FieldIndex
from ctr.data.formats import make_parser
from ctr.data.quality import auc
from ctr.data.schema import PRESETS


def test_lines_parse_as_kv_with_every_field():
    synth = SyntheticStream(SyntheticSpec())
    vals, _, labels = synth.sample(200)
    parse = make_parser(PRESETS["kv"], FieldIndex())
    samples = [parse(line) for line in synth.format(vals, labels)]
    assert [s.label for s in samples] == labels.astype(float).tolist()
    assert all(s.tokens == [str(v) for v in row] for s, row in zip(samples, vals.tolist(), strict=True))


@pytest.mark.slow
def test_planted_interactions_carry_signal_that_the_linear_part_lacks():
    with_pairs = SyntheticStream(SyntheticSpec())
    vals, logits, labels = with_pairs.sample(100_000)
    linear = np.full(vals.shape[0], with_pairs.spec.bias)
    for f in range(vals.shape[1]):
        linear += with_pairs.planted_weights(f, vals[:, f])
    assert auc(labels, logits) > auc(labels, linear) + 0.03
