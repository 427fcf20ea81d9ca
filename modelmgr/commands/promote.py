"""`boundless model promote LABEL --serving ADDR,...`: promotes a labelled version on its
shadow evidence. Every serving replica reports what its shadow scoring of the label saw
(ModelStatus: copies scored, dropped and failed, the mean |shadow - live| score difference);
the sums over replicas pass the gate, or nothing changes. A promotion pins the version as
the stable one (the policy every unrouted request follows) and removes the label, then
waits until every replica serves it.

The gate's rule (`judge`) is a pure function of the evidence, tested without serving: at
least `min_scored` copies, none failed, and a mean absolute score difference at most
`max_mean_abs_diff`. A shadow that scores as the stable version does within that bound,
over enough live traffic, is what a canary must show before it takes every request."""

from __future__ import annotations

from dataclasses import dataclass

from ctr.repository.versions import Repository, RepositoryError
from modelmgr.commands import actions
from serving.client.shadow_evidence import ShadowEvidence


@dataclass
class ShadowTotals:
    """One label's evidence summed over the replicas that reported it."""

    evidence: ShadowEvidence
    replicas: int = 0

    def describe(self) -> str:
        e = self.evidence
        return (
            f"{e.label}={e.version}: {e.scored} copies scored on {self.replicas} replica(s),"
            f" {e.dropped} dropped, {e.failed} failed; mean |shadow - live| {e.mean_abs_diff:.6f},"
            f" mean shadow - live {e.mean_diff:+.6f}"
        )


def judge(totals: ShadowTotals, min_scored: int, max_mean_abs_diff: float) -> str | None:
    """Why the evidence does not allow the promotion, or None when it does."""
    e = totals.evidence
    if e.scored < min_scored:
        return f"{e.scored} shadow copies scored, fewer than the {min_scored} asked (--min-shadow)"
    if e.failed:
        return f"{e.failed} shadow copies failed to score (the serving log says why)"
    if not e.mean_abs_diff <= max_mean_abs_diff:  # NaN (no copy scored) never passes
        return f"mean |shadow - live| {e.mean_abs_diff:.6f} is above {max_mean_abs_diff:g} (--max-mean-abs-diff)"
    return None


def gather(addresses: list[str], model: str, label: str, version: int) -> ShadowTotals:
    """The label's evidence for `version` from every replica; a replica that does not
    answer is an error (a promotion decided on part of the fleet is not one)."""
    import grpc

    from serving.client import PredictClient

    totals = ShadowTotals(ShadowEvidence(label, version))
    for address in addresses:
        client = PredictClient(address, model=model, timeout=5.0)
        try:
            status = client.status()
        except grpc.RpcError as e:
            raise RepositoryError(f"serving replica {address} did not answer: {e.details()}") from None
        finally:
            client.close()
        totals.replicas += 1
        for m in status.shadows:
            if m.label == label and m.version == version:
                totals.evidence.add(ShadowEvidence.from_message(m))
    return totals


def promote(
    repo: Repository,
    label: str,
    serving: list[str],
    min_scored: int,
    max_mean_abs_diff: float,
    dry_run: bool = False,
) -> tuple[ShadowTotals, str | None]:
    """(the evidence, why not) — and when the evidence allows it and this is no dry run,
    the label's version is pinned as the stable version and the label removed."""
    if not serving:
        raise RepositoryError("promote reads the shadow evidence from serving: --serving names the replicas")
    labels = repo.routing()
    entry = labels.get(label)
    if entry is None:
        raise RepositoryError(f"no label {label!r} (labels: {', '.join(labels) or 'none'})")
    if entry.shadow <= 0:
        raise RepositoryError(
            f"label {label!r} has no shadow share, so serving gathered no evidence for it:"
            f" `boundless model label {label} {entry.version} --shadow S` first, or pin it"
        )
    totals = gather(serving, repo.model, label, entry.version)
    why_not = judge(totals, min_scored, max_mean_abs_diff)
    if why_not is None and not dry_run:
        actions.pin(repo, entry.version, f"promoted {label} on shadow evidence: {totals.describe()}")
        repo.remove_label(label)
    return totals, why_not
