"""The manager's rulings from evidence alone, no files: publish, reject, roll back, compact."""

import math

from modelmgr.publish.decide import Evidence, Publish, Reject, RollBack, compacts, decide, identity, spec_change
from modelmgr.publish.evaluate import Evaluation
from modelmgr.publish.gate import QualityGate

GATE = QualityGate(min_samples=100, max_auc_drop=0.02, rollback_auc_drop=0.01)


def ev(version: int, auc: float, samples: int = 1000, logloss: float = 0.4, finite: bool = True) -> Evaluation:
    return Evaluation(version, samples, auc, logloss, 1.0, finite)


def evidence(candidate, live=None, predecessor=None, follows_latest=True, error="", se=math.nan):
    return Evidence("e7", 1000, 0, candidate, live, predecessor, follows_latest, error, se)


def test_a_candidate_as_good_as_the_live_version_is_published_with_its_evidence():
    (action,) = decide(evidence(ev(0, 0.75), ev(3, 0.76)), GATE)
    assert isinstance(action, Publish)
    assert action.evidence["candidate"]["auc"] == 0.75 and action.evidence["live"]["version"] == 3


def test_a_candidate_trailing_the_live_version_is_rejected_by_the_gate():
    (action,) = decide(evidence(ev(0, 0.70), ev(3, 0.76)), GATE)
    assert isinstance(action, Reject) and action.stage == "gate"
    assert "trails version 3's 0.7600" in action.reason and action.evidence["live"]["version"] == 3


def test_the_first_candidate_needs_only_its_own_scores():
    assert isinstance(decide(evidence(ev(0, 0.6)), GATE)[0], Publish)
    (few,) = decide(evidence(ev(0, 0.9, samples=10)), GATE)
    assert isinstance(few, Reject) and "10 holdout samples" in few.reason
    (nan,) = decide(evidence(ev(0, 0.9, finite=False)), GATE)
    assert isinstance(nan, Reject) and "NaN" in nan.reason


def test_a_live_version_behind_its_predecessor_is_rolled_back_and_the_candidate_judged_against_the_predecessor():
    actions = decide(evidence(ev(0, 0.75), live=ev(4, 0.70), predecessor=ev(3, 0.78)), GATE)
    back, verdict = actions
    assert isinstance(back, RollBack) and back.to_version == 3 and "fell behind version 3" in back.reason
    assert isinstance(verdict, Reject) and "trails version 3's 0.7800" in verdict.reason  # judged against 3, not 4


def test_a_drop_within_the_holdouts_noise_does_not_pin_serving():
    """0.012 behind on a holdout whose paired difference has a standard error of 0.006: 2 errors."""
    (verdict,) = decide(evidence(ev(0, 0.75), live=ev(4, 0.748), predecessor=ev(3, 0.760), se=0.006), GATE)
    assert isinstance(verdict, Publish) and verdict.evidence["live"]["version"] == 4
    back, _ = decide(evidence(ev(0, 0.75), live=ev(4, 0.748), predecessor=ev(3, 0.760), se=0.003), GATE)
    assert isinstance(back, RollBack) and back.se == 0.003 and "by 4.0 standard errors" in back.reason
    # a significant drop below rollback_auc_drop is not worth a pin either
    (small,) = decide(evidence(ev(0, 0.75), live=ev(4, 0.752), predecessor=ev(3, 0.760), se=0.0001), GATE)
    assert isinstance(small, Publish)
    # rollback_z 0: the drop alone decides, as with an unknown error
    drop_only = QualityGate(min_samples=100, rollback_auc_drop=0.01, rollback_z=0.0)
    assert isinstance(decide(evidence(ev(0, 0.75), ev(4, 0.748), ev(3, 0.760), se=0.006), drop_only)[0], RollBack)
    assert isinstance(decide(evidence(ev(0, 0.75), ev(4, 0.748), ev(3, 0.760)), GATE)[0], RollBack)


def test_a_live_version_scoring_nan_is_rolled_back_whatever_the_error():
    (back, _) = decide(evidence(ev(0, 0.75), ev(4, math.nan, finite=False), ev(3, 0.76), se=math.nan), GATE)
    assert isinstance(back, RollBack) and back.to_version == 3


def test_an_operator_pin_stands():
    actions = decide(evidence(ev(0, 0.75), live=ev(4, 0.70), predecessor=ev(3, 0.78), follows_latest=False), GATE)
    assert [type(a) for a in actions] == [Publish]


def test_a_candidate_that_cannot_load_is_rejected_after_a_due_roll_back():
    actions = decide(evidence(None, live=ev(4, 0.70), predecessor=ev(3, 0.78), error="v.bin: bad CRC"), GATE)
    assert [type(a) for a in actions] == [RollBack, Reject]
    refused = actions[1]
    assert isinstance(refused, Reject) and refused.stage == "verify" and "bad CRC" in refused.reason


def test_identity_refuses_another_name_always_and_another_spec_unless_accepted():
    live = {"type": "fm", "fields": ["a", "b"]}
    assert identity("ctr", {"name": "ctr", "type": "fm", "fields": ["a", "b", "c"]}, live, False) is None  # fm grows
    other = identity("ctr", {"name": "ads", "type": "fm"}, live, True)
    assert other is not None and other.stage == "identity" and "--model-name ads" in other.reason
    new_type = identity("ctr", {"name": "ctr", "type": "ffm", "fields": ["a", "b"]}, live, False)
    assert new_type is not None and "--accept-new-spec" in new_type.reason
    assert identity("ctr", {"name": "ctr", "type": "ffm", "fields": ["a", "b"]}, live, True) is None
    assert identity("ctr", {"name": "ctr", "type": "ffm"}, None, False) is None  # nothing served yet


def test_a_field_list_that_sizes_the_tables_must_not_change():
    assert spec_change({"type": "ffm", "fields": ["a", "b"]}, {"type": "ffm", "fields": ["a", "b", "c"]}) is not None
    assert spec_change({"type": "lr", "fields": ["a", "b"]}, {"type": "lr", "fields": ["a", "b", "c"]}) is None
    assert spec_change({"type": "lr", "fields": ["a", "b"]}, {"type": "lr", "fields": ["b", "a"]}) is not None


def test_compaction_folds_long_delta_chains_only():
    assert compacts("delta", 20, 20) and not compacts("delta", 19, 20)
    assert not compacts("full", 50, 20) and not compacts("delta", 50, 0)


def test_nan_auc_of_the_live_version_does_not_block_a_candidate():
    (action,) = decide(evidence(ev(0, 0.7), ev(3, math.nan)), GATE)
    assert isinstance(action, Publish)
