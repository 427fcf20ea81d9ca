"""`boundless model`: the manager daemon (watch) and version commands."""

from __future__ import annotations

import argparse
import json
import signal
import threading
import time
from pathlib import Path

from ctr import config as cfg
from ctr import daemon
from modelmgr.config import ModelMgrConfig
from modelmgr.gate import QualityGate
from modelmgr.notify import Notifier
from modelmgr.publisher import Publisher
from modelmgr.repository import Policy, Repository, RepositoryError

ENV_PREFIX = "BOUNDLESS_MODELMGR_"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    watch = sub.add_parser("watch", help="run the manager daemon: verify, gate and publish exports", allow_abbrev=False)
    cfg.add_arguments(watch, ModelMgrConfig)
    for name, help_text in (
        ("list", "list published and rejected versions"),
        ("rollback", "pin serving to VERSION (default: the version before the served one)"),
        ("pin", "pin serving to VERSION"),
        ("unpin", "follow the latest version again"),
        ("gc", "retention: remove versions outside the newest full ones and their chains"),
        ("show", "one version's manifest and quality evidence"),
        ("diff", "rows changed and weight drift between two versions"),
        ("status", "the version each serving replica reports"),
    ):
        p = sub.add_parser(name, help=help_text, allow_abbrev=False)
        p.add_argument("--repo", default="repo", help="model repository folder")
        p.add_argument("--model", default="ctr", help="model name")
        if name in ("rollback", "pin"):
            p.add_argument("version", type=int, nargs="?" if name == "rollback" else None)
        if name in ("list", "show", "diff", "status", "gc"):
            p.add_argument("--json", action="store_true", help="print JSON")
        if name == "show":
            p.add_argument("version", type=int)
        if name == "diff":
            p.add_argument("a", type=int)
            p.add_argument("b", type=int)
        if name == "gc":
            p.add_argument("--keep-full", type=int, default=3, help="full versions kept with their delta chains")
            p.add_argument("--dry-run", action="store_true", help="list what would go, remove nothing")
        if name in ("status", "pin", "rollback", "unpin"):
            p.add_argument(
                "--serving",
                default="",
                help="serving replicas (host:port,...): report them, or wait until they serve the version",
            )
            p.add_argument("--wait-s", type=float, default=10.0, help="how long to wait for the replicas")


def watch(conf: ModelMgrConfig) -> int:
    log = daemon.setup_logging("modelmgr", conf.log_level)
    repo = Repository(conf.repo, conf.model)
    gate = QualityGate(
        min_samples=conf.min_samples,
        max_auc_drop=conf.max_auc_drop,
        min_auc=conf.min_auc,
        max_logloss=conf.max_logloss,
        calibration_low=conf.calibration_low,
        calibration_high=conf.calibration_high,
        rollback_auc_drop=conf.rollback_auc_drop,
    )
    publisher = Publisher(repo, Path(conf.exports), gate, conf.compact_after, conf.keep_full)
    guarded = daemon.guard(conf, conf.host)  # its identity for the serving notifications
    notifier = Notifier(conf.notify, conf.model)
    server, port, _ = daemon.grpc_server(conf.host, conf.port, 2, lambda s: None, [], reflection=conf.reflection, **guarded)
    metrics_port = daemon.metrics_server(conf.host, conf.metrics_port)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("watching %s, publishing into %s/%s", conf.exports, conf.repo, conf.model)
    daemon.write_ready_file(conf.ready_file, grpc_port=port, metrics_port=metrics_port)
    while not stop.is_set():
        try:
            publisher.poll()
            if publisher.changed:
                publisher.changed = False
                notifier.notify()
        except Exception as e:  # noqa: BLE001 - a full disk, a damaged repository: retry, never die
            log.error("scan failed: %s", e)
        stop.wait(conf.poll_s)
    server.stop(1)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "watch":
        return watch(cfg.build(ModelMgrConfig, ENV_PREFIX, args))
    repo = Repository(args.repo, args.model)
    try:
        if args.action == "list":
            return _list(repo, args.json)
        if args.action in ("gc", "show", "diff", "status"):
            from modelmgr import inspect_cli

            return inspect_cli.run(repo, args)
        if args.action == "pin":
            repo.set_policy(Policy("pinned", args.version))
        elif args.action == "unpin":
            repo.set_policy(Policy("latest"))
        elif args.action == "rollback":
            version = args.version
            if version is None:
                current = repo.target()
                older = [v for v in repo.versions() if current is not None and v < current]
                if not older:
                    raise RepositoryError("no version older than the served one to roll back to")
                version = older[-1]
            repo.set_policy(Policy("pinned", version, "rollback from the CLI"))
    except RepositoryError as e:
        print(f"boundless model {args.action}: error: {e}")
        return 2
    target = repo.target()
    print(f"{args.model}: policy {repo.policy().describe()}, serving should load version {target}")
    if args.serving:
        from modelmgr import inspect_cli

        return inspect_cli.wait_for(args.serving, target, args.wait_s, args.model)
    return 0


def _list(repo: Repository, as_json: bool) -> int:
    rows: list[dict[str, object]] = []
    target = repo.target()
    for v in repo.versions():
        why = repo.broken(v)
        if why is not None:
            rows.append({"version": v, "broken": why, "served": False})
            continue
        m = repo.manifest_model(v)
        cand = (m.evaluation or {}).get("candidate") or {}
        rows.append(
            {
                "version": v,
                "kind": m.kind,
                "base": m.base_version,
                "samples": m.metrics.get("samples"),
                "holdout_auc": cand.get("auc"),
                "created": m.created,
                "served": v == target,
            }
        )
    policy = repo.policy()
    if as_json:
        doc = {"policy": policy.describe(), "policy_reason": policy.reason, "versions": rows, "rejected": repo.rejected()}
        print(json.dumps(doc, indent=1))
        return 0
    print(f"model {repo.model}  policy: {policy.describe()}" + (f" ({policy.reason})" if policy.reason else ""))
    print(f"{'version':>8} {'kind':>5} {'base':>6} {'samples':>9} {'AUC':>7}  created")
    for r in rows:
        if "broken" in r:
            print(f"{r['version']:>8} broken: {r['broken']}")
            continue
        auc = f"{r['holdout_auc']:.4f}" if isinstance(r["holdout_auc"], float) else "-"
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(r["created"])))  # type: ignore[arg-type]
        mark = " *" if r["served"] else ""
        samples = r["samples"] if isinstance(r["samples"], int | float) else 0
        print(f"{r['version']:>8} {r['kind']:>5} {r['base']:>6} {samples:>9.0f} {auc:>7}  {when}{mark}")
    for rej in repo.rejected():
        print(f"rejected export {rej.get('export_id')}: {rej.get('reason')}")
    return 0
