"""`boundless model gc|show|diff|status`, and the wait for serving replicas after a pin,
rollback or unpin: what serving actually loaded, not what the policy file says."""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ctr.repository.versions import Repository
from ctr.runtime import strict_json
from modelmgr.commands import actions


def run(repo: Repository, args: argparse.Namespace) -> int:
    if args.action == "gc":
        return report_gc(actions.gc(repo, args.keep_full, dry_run=args.dry_run), args.dry_run, args.json)
    if args.action == "show":
        m = repo.manifest(args.version)
        why = repo.broken(args.version)
        doc = {**m, "broken": why, "served": repo.target() == args.version}
        print(strict_json.dumps(doc, indent=1) if args.json else _show(doc))
        return 0
    if args.action == "diff":
        d = diff(repo, args.a, args.b)
        print(strict_json.dumps(d, indent=1) if args.json else "\n".join(f"{k}: {v}" for k, v in d.items()))
        return 0
    if args.action == "status":
        rows = [replica_status(a) for a in _addresses(args.serving)]
        doc = {"policy": repo.policy().describe(), "target": repo.target(), "replicas": rows}
        if args.json:
            print(strict_json.dumps(doc, indent=1))
        else:
            print(f"policy {doc['policy']}, target version {doc['target']}")
            for r in rows:
                print(f"{r['address']}: " + (f"version {r['version']} ({r['keys']} keys)" if "version" in r else r["error"]))
        return 0 if all("version" in r for r in rows) else 1
    raise ValueError(args.action)


def report_gc(gone: list[int], dry_run: bool, as_json: bool) -> int:
    verb = "would remove" if dry_run else "removed"
    print(strict_json.dumps({"removed": gone, "dry_run": dry_run}) if as_json else f"{verb} versions {gone or 'none'}")
    return 0


def _show(doc: dict[str, Any]) -> str:
    ev = (doc.get("evaluation") or {}).get("candidate") or {}
    lines = [
        f"version {doc['version']} ({doc['kind']}, base {doc['base_version']}, chain {doc['delta_chain']})",
        f"export {doc['export_id']}, {doc['shard_count']} shards, {len(doc['files'])} files",
        f"holdout: AUC {ev.get('auc')}, logloss {ev.get('logloss')}, calibration {ev.get('calibration')}"
        f" over {ev.get('samples')} samples",
        f"served: {doc['served']}" + (f", broken: {doc['broken']}" if doc["broken"] else ""),
    ]
    return "\n".join(lines)


def _addresses(text: str) -> list[str]:
    return [a for a in text.split(",") if a]


def replica_status(address: str) -> dict[str, Any]:
    from serving.client import PredictClient

    client = PredictClient(address, timeout=2.0)
    try:
        s = client.status()
        return {"address": address, "version": int(s.version), "keys": int(s.keys), "policy": s.policy}
    except Exception as e:  # noqa: BLE001 - a replica that does not answer is reported, not fatal
        details = e.details() if hasattr(e, "details") else str(e)
        return {"address": address, "error": f"no answer: {details}"}
    finally:
        client.close()


def wait_for(serving: str, version: int | None, wait_s: float, model: str = "ctr") -> int:
    """Waits until every replica reports `version`; 1 (naming the laggards) if not in time."""
    from modelmgr.notify import Notifier

    Notifier(serving, model).notify()  # look now, not at the next poll
    deadline = time.monotonic() + wait_s
    while True:
        rows = [replica_status(a) for a in _addresses(serving)]
        behind = [r for r in rows if r.get("version") != version]
        if not behind:
            print(f"every replica serves version {version}")
            return 0
        if time.monotonic() > deadline:
            for r in behind:
                print(f"{r['address']}: still serves {r.get('version', r.get('error'))}, not {version}")
            return 1
        time.sleep(0.1)


def _keys(model: Any) -> np.ndarray:
    return np.unique(np.concatenate([m.items()[0] for m in [*model.images, model.overlay]]))


def diff(repo: Repository, a: int, b: int) -> dict[str, Any]:
    """Rows changed between two versions and how far the weights moved."""
    from modelmgr.publish.evaluate import load_published  # serving's loader, only for a diff

    ma, mb = load_published(repo, a), load_published(repo, b)
    keys = np.unique(np.concatenate([_keys(ma), _keys(mb)]))
    ra, rb = ma.rows(keys), mb.rows(keys)
    present_a, present_b = np.abs(ra).sum(axis=1) > 0, np.abs(rb).sum(axis=1) > 0
    delta = rb.astype(np.float64) - ra.astype(np.float64)
    changed = (delta != 0).any(axis=1)
    dense = {name: float(np.abs(mb.dense[name] - ma.dense[name]).max()) for name in ma.dense if name in mb.dense}
    return {
        "a": a,
        "b": b,
        "rows_changed": int((changed & present_a & present_b).sum()),
        "rows_added": int((present_b & ~present_a).sum()),
        "rows_removed": int((present_a & ~present_b).sum()),
        "weight_drift_l2": float(np.sqrt((delta**2).sum())),
        "weight_drift_max": float(np.abs(delta).max()) if delta.size else 0.0,
        "dense_drift_max": dense,
    }
