"""The promotion gate's rule (modelmgr.commands.promote.judge), without serving."""

from __future__ import annotations

from modelmgr.commands.promote import ShadowTotals, judge
from serving.client.shadow_evidence import ShadowEvidence


def _totals(scored: int, failed: int = 0, mean_abs: float = 0.001) -> ShadowTotals:
    return ShadowTotals(ShadowEvidence("canary", 7, scored, 3, failed, mean_abs * scored, -0.5 * mean_abs * scored), 2)


def test_enough_close_copies_and_no_failure_promote() -> None:
    assert judge(_totals(1000), min_scored=1000, max_mean_abs_diff=0.01) is None
    assert abs(_totals(1000).evidence.mean_abs_diff - 0.001) < 1e-12 and abs(_totals(1000).evidence.mean_diff + 0.0005) < 1e-12


def test_too_few_copies_a_failure_or_too_far_refuse_naming_why() -> None:
    assert "fewer than the 1000" in str(judge(_totals(999), 1000, 0.01))
    assert "1 shadow copies failed" in str(judge(_totals(5000, failed=1), 1000, 0.01))
    assert "above 0.0005" in str(judge(_totals(5000, mean_abs=0.001), 1000, 0.0005))


def test_no_evidence_at_all_never_promotes() -> None:
    empty = ShadowTotals(ShadowEvidence("canary", 7))
    assert judge(empty, min_scored=0, max_mean_abs_diff=1.0) is not None  # no copy: the difference is unknown
    assert "0 copies scored on 0 replica(s)" in empty.describe()


def test_evidence_crosses_the_wire_as_means_and_comes_back_as_sums() -> None:
    e = ShadowEvidence("canary", 7, 40, 3, 1, 0.4, -0.2, 0.8)
    back = ShadowEvidence.from_message(e.to_message())
    assert (back.label, back.version, back.scored, back.dropped, back.failed) == ("canary", 7, 40, 3, 1)
    for got, want in ((back.sum_abs_diff, 0.4), (back.sum_diff, -0.2), (back.seconds, 0.8)):
        assert abs(got - want) < 1e-12
    total = ShadowEvidence("canary", 7)
    for _ in range(2):
        total.add(back)
    assert total.scored == 80 and abs(total.mean_abs_diff - 0.01) < 1e-12 and total.dropped == 6
