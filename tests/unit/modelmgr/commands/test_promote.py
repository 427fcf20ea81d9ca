"""The promotion gate's rule (modelmgr.commands.promote.judge), without serving."""

from __future__ import annotations

from modelmgr.commands.promote import ShadowTotals, judge


def _totals(scored: int, failed: int = 0, mean_abs: float = 0.001) -> ShadowTotals:
    return ShadowTotals("canary", 7, 2, scored, 3, failed, mean_abs * scored, -0.5 * mean_abs * scored)


def test_enough_close_copies_and_no_failure_promote() -> None:
    assert judge(_totals(1000), min_scored=1000, max_mean_abs_diff=0.01) is None
    assert abs(_totals(1000).mean_abs_diff - 0.001) < 1e-12 and abs(_totals(1000).mean_diff + 0.0005) < 1e-12


def test_too_few_copies_a_failure_or_too_far_refuse_naming_why() -> None:
    assert "fewer than the 1000" in str(judge(_totals(999), 1000, 0.01))
    assert "1 shadow copies failed" in str(judge(_totals(5000, failed=1), 1000, 0.01))
    assert "above 0.0005" in str(judge(_totals(5000, mean_abs=0.001), 1000, 0.0005))


def test_no_evidence_at_all_never_promotes() -> None:
    empty = ShadowTotals("canary", 7)
    assert judge(empty, min_scored=0, max_mean_abs_diff=1.0) is not None  # no copy: the difference is unknown
    assert "0 copies scored on 0 replica(s)" in empty.describe()
