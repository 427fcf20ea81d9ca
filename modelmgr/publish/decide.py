"""What the manager does with an export, decided from evidence alone: publish it, reject it
(and why), roll the live version back to its predecessor, compact a long delta chain. Pure
functions over names, specs and holdout scores; the publisher (modelmgr.publish.publisher)
gathers the evidence and carries the decisions out on the repository."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ctr.model.spec import FIELD_MODELS
from modelmgr.publish.evaluate import Evaluation
from modelmgr.publish.gate import QualityGate


@dataclass(frozen=True)
class Publish:
    evidence: dict[str, Any]


@dataclass(frozen=True)
class Reject:
    stage: str  # identity, lineage, schema, verify, gate, order, internal
    reason: str
    evidence: Any = None


@dataclass(frozen=True)
class RollBack:
    to_version: int
    reason: str
    live: Evaluation
    predecessor: Evaluation
    se: float = math.nan  # standard error of the AUC difference on the holdout that showed it


@dataclass(frozen=True)
class Evidence:
    """A candidate's scores on its holdout, beside the live version's and its predecessor's."""

    export_id: str
    holdout_samples: int
    excluded_seen: int  # trained-on samples of the holdout, left out of every score
    candidate: Evaluation | None  # None: the candidate could not be loaded (candidate_error)
    live: Evaluation | None = None
    predecessor: Evaluation | None = None
    follows_latest: bool = True  # the policy follows the newest version (an operator's pin stands)
    candidate_error: str = ""
    behind_se: float = math.nan  # standard error of the predecessor's AUC minus the live one's, same holdout


def spec_change(live: dict[str, Any], candidate: dict[str, Any]) -> str | None:
    """Why a candidate spec is another model than the live one; None when it is the same
    model (a field list may grow where it does not size the tables)."""
    if live.get("type") != candidate.get("type"):
        return f"the export is a {candidate.get('type')} model, the live version a {live.get('type')} one"
    old, new = list(live.get("fields") or []), list(candidate.get("fields") or [])
    sized = candidate.get("type") in FIELD_MODELS  # the field list sizes its tables: it must stay the same
    same = old == new if sized else new[: len(old)] == old
    if not same:
        return (
            f"the export's {len(new)} fields ({', '.join(new[:4])}...) are not"
            f" the live version's {len(old)} ({', '.join(old[:4])}...)"
        )
    return None


def identity(model: str, export_model: dict[str, Any], live_spec: dict[str, Any] | None, accept_new_spec: bool) -> Reject | None:
    """An export of another model is never published as this one: another name always,
    another type or field list unless the manager accepts a new spec."""
    name = str(export_model.get("name", ""))
    if name != model:
        return Reject(
            "identity",
            f"the export is of model {name!r}; this manager publishes {model!r}"
            f" (export another model into its own folder, watched by a manager with --model-name {name})",
        )
    if live_spec is None or accept_new_spec:
        return None
    why = spec_change(live_spec, export_model)
    if why is not None:
        serving = f"not the model {model!r} is serving (a manager started with --accept-new-spec publishes it)"
        return Reject("identity", f"{why}: {serving}")
    return None


def roll_back(evidence: Evidence, gate: QualityGate) -> RollBack | None:
    """The live version's predecessor, when the live one falls behind it on this holdout
    (only while the policy follows the latest)."""
    live, pred = evidence.live, evidence.predecessor
    if live is None or pred is None or not evidence.follows_latest:
        return None
    if not gate.falls_behind(live, pred, evidence.behind_se):
        return None
    margin = ""
    if math.isfinite(live.auc) and math.isfinite(pred.auc) and evidence.behind_se > 0:
        margin = f" by {(pred.auc - live.auc) / evidence.behind_se:.1f} standard errors"
    reason = (
        f"auto-rollback: version {live.version} (holdout AUC {live.auc:.4f}) fell behind version "
        f"{pred.version} ({pred.auc:.4f}){margin} on the holdout of export {evidence.export_id}"
    )
    return RollBack(pred.version, reason, live, pred, evidence.behind_se)


def decide(evidence: Evidence, gate: QualityGate) -> list[RollBack | Publish | Reject]:
    """In order: a roll-back when the live version fell behind its predecessor, then the
    candidate's publish or reject, judged against whichever version then serves."""
    actions: list[RollBack | Publish | Reject] = []
    live = evidence.live
    back = roll_back(evidence, gate)
    if back is not None:
        actions.append(back)
        live = back.predecessor
    if evidence.candidate is None:
        actions.append(Reject("verify", f"the candidate cannot be loaded: {evidence.candidate_error}"))
        return actions
    shown = {
        # samples neither the candidate nor the live version trained on; trained-on ones left out
        "holdout": {"samples": evidence.holdout_samples, "excluded_seen": evidence.excluded_seen},
        "candidate": evidence.candidate.to_dict(),
        "live": None if live is None else live.to_dict(),
    }
    reason = gate.judge(evidence.candidate, live)
    actions.append(Publish(shown) if reason is None else Reject("gate", reason, shown))
    return actions


def compacts(kind: str, chain_length: int, compact_after: int) -> bool:
    """Whether a just-published version's delta chain is long enough to fold into a full one."""
    return compact_after > 0 and kind == "delta" and chain_length >= compact_after
