"""Synthetic CTR stream with a planted model, so that AUC means something.

Each field draws its value from a truncated Zipf law; every (field, value) has a planted
weight, derived from a seeded hash so no table is needed. The first `interaction_fields`
fields (the low-cardinality ones) also carry planted latent vectors, and every pair of them
adds <u_f(value_f), u_g(value_g)> to the logit: pairwise interactions that LR cannot
express and FM, FFM and DeepFM can. The label is Bernoulli of the sigmoid of the planted
logit. Lines come out in the kv format `label<TAB>field=value...`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ctr.data.hashing import hash_features


@dataclass(frozen=True)
class SyntheticSpec:
    fields: int = 16
    min_cardinality: int = 20
    max_cardinality: int = 200_000
    zipf_exponent: float = 1.1
    weight_scale: float = 0.9
    bias: float = -1.2
    seed: int = 7
    interaction_fields: int = 6
    interaction_rank: int = 4
    interaction_scale: float = 0.45


class SyntheticStream:
    def __init__(self, spec: SyntheticSpec = SyntheticSpec()) -> None:
        self.spec = spec
        self.rng = np.random.default_rng(spec.seed)
        cards = np.geomspace(spec.min_cardinality, spec.max_cardinality, spec.fields)
        self.cardinalities = cards.astype(np.int64)
        self._cdfs = []
        for c in self.cardinalities:
            p = 1.0 / np.arange(1, c + 1) ** spec.zipf_exponent
            self._cdfs.append(np.cumsum(p) / p.sum())
        self.names = [f"f{i}" for i in range(spec.fields)]
        # high-cardinality fields carry smaller weights each, as ids do in real logs
        self.scales = spec.weight_scale / np.sqrt(np.log(self.cardinalities))
        latent = np.random.default_rng(spec.seed + 1)
        m = min(spec.interaction_fields, spec.fields)
        self.latents = [
            latent.normal(scale=spec.interaction_scale, size=(int(c), spec.interaction_rank)) for c in self.cardinalities[:m]
        ]

    def planted_weights(self, field: int, values: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        keys = hash_features([field + self.spec.seed * 1000] * len(values), [str(v) for v in values])
        u = (keys >> np.uint64(11)).astype(np.float64) / float(1 << 53)
        g = np.sqrt(-2.0 * np.log(np.maximum(u, 1e-12))) * np.cos(2 * np.pi * u * 7.0)
        return np.asarray(g * self.scales[field], dtype=np.float64)

    def sample(self, n: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.int8]]:
        """(values[n, fields], planted logits[n], labels[n])."""
        vals = np.empty((n, self.spec.fields), dtype=np.int64)
        logit = np.full(n, self.spec.bias)
        for f, cdf in enumerate(self._cdfs):
            vals[:, f] = np.searchsorted(cdf, self.rng.random(n))
            logit += self.planted_weights(f, vals[:, f])
        for f, lf in enumerate(self.latents):
            for g in range(f + 1, len(self.latents)):
                logit += np.einsum("ij,ij->i", lf[vals[:, f]], self.latents[g][vals[:, g]])
        p = 1.0 / (1.0 + np.exp(-logit))
        labels = (self.rng.random(n) < p).astype(np.int8)
        return vals, logit, labels

    def format(self, vals: npt.NDArray[np.int64], labels: npt.NDArray[np.int8]) -> list[str]:
        """Sampled rows as kv lines."""
        return [
            f"{y}\t" + "\t".join(f"{name}={v}" for name, v in zip(self.names, row, strict=True))
            for y, row in zip(labels.tolist(), vals.tolist(), strict=True)
        ]
