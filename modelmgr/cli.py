"""`boundless model`: the manager daemon (watch) and version commands."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ctr.repository.s3_lease import TERM_S as WRITER_LEASE_S
from ctr.repository.versions import Repository, RepositoryError
from ctr.repository.writer_lock import WriterBusy, writer_lock
from ctr.runtime import config as cfg
from ctr.runtime import daemon, strict_json
from ctr.runtime.auth import service_policy
from ctr.runtime.repeated_error import RepeatedError
from modelmgr.admin_service import ModelAdminServicer
from modelmgr.commands import actions
from modelmgr.config import HELP_EXAMPLES, HELP_GROUPS, ModelMgrConfig
from modelmgr.manager import Manager
from modelmgr.notify import Notifier
from modelmgr.publish.gate import QualityGate
from modelmgr.publish.publisher import Publisher
from protos import modelmgr_pb2, modelmgr_pb2_grpc

ENV_PREFIX = "BOUNDLESS_MODELMGR_"


# who may call what on the manager's admin service (ctr.runtime.auth roles)
ADMIN_SERVICE = modelmgr_pb2.DESCRIPTOR.services_by_name["ModelAdmin"].full_name
ADMIN_ROLES = {
    f"/{ADMIN_SERVICE}/": "admin",  # pin, unpin, rollback, gc
    f"/{ADMIN_SERVICE}/Publish": "trainer",
    f"/{ADMIN_SERVICE}/Describe": "predict",
}
REMOTE = ("pin", "unpin", "rollback", "gc", "publish")  # what --manager sends to the daemon


def _share(text: str) -> float:
    """A share of requests: a number from 0 to 1 (argparse names the flag it is for)."""
    try:
        share = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a share from 0 to 1 (0.1 is a tenth of the requests)")
    return share


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    watch = sub.add_parser("watch", help="run the manager daemon: verify, gate and publish exports", allow_abbrev=False)
    cfg.add_arguments(watch, ModelMgrConfig, HELP_GROUPS, HELP_EXAMPLES)
    for name, help_text in (
        ("list", "list published and rejected versions"),
        ("rollback", "pin serving to VERSION (default: the version before the served one)"),
        ("pin", "pin serving to VERSION"),
        ("unpin", "follow the latest version again"),
        ("label", "label VERSION as NAME: a canary (--share of routed requests) or a shadow (--shadow of live requests)"),
        ("unlabel", "remove the label NAME"),
        ("promote", "pin the version labelled NAME as stable, if its shadow evidence on every --serving replica passes"),
        ("gc", "retention: remove versions outside the newest full ones and their chains"),
        ("publish", "have the manager daemon publish READY exports now (needs --manager)"),
        ("show", "one version's manifest and quality evidence"),
        ("diff", "rows changed and weight drift between two versions"),
        ("status", "the version each serving replica reports"),
    ):
        p = sub.add_parser(name, help=help_text, allow_abbrev=False)
        p.add_argument("--repo", default="repo", help="model repository folder (or s3://bucket/prefix)")
        p.add_argument("--model-name", default="ctr", help="the model's name in the repository")
        if name in REMOTE:
            p.add_argument(
                "--manager",
                default=os.environ.get("BOUNDLESS_MANAGER", ""),
                help="send the command to this manager daemon (host:port; identity from BOUNDLESS_TLS_* and "
                "BOUNDLESS_TOKEN) instead of writing --repo directly; env BOUNDLESS_MANAGER",
            )
        if name in ("rollback", "pin"):
            p.add_argument("version", type=int, nargs="?" if name == "rollback" else None)
            p.add_argument("--reason", default="", help="why, kept in the policy and shown by list")
        if name in ("label", "unlabel", "promote"):
            p.add_argument("label", help="the label's name (e.g. canary)")
        if name == "promote":
            p.add_argument("--min-shadow", type=int, default=1000, help="shadow copies scored, over all replicas, at least")
            p.add_argument(
                "--max-mean-abs-diff",
                type=float,
                default=0.01,
                help="the shadow's mean |score - live score| over its copies, at most",
            )
            p.add_argument("--dry-run", action="store_true", help="judge the evidence, change nothing")
        if name == "label":
            p.add_argument("version", type=int)
            p.add_argument("--share", type=_share, default=0.0, help="share of routed requests (by routing key) it scores")
            p.add_argument("--shadow", type=_share, default=0.0, help="share of live requests it also scores, off the path")
        if name == "publish":
            p.add_argument("export_id", nargs="?", default="", help="the export folder to report on (default: all READY)")
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
        if name in ("status", "pin", "rollback", "unpin", "promote"):
            p.add_argument(
                "--serving",
                default="",
                help="serving replicas (host:port,...): report them, or wait until they serve the version",
            )
            p.add_argument("--wait-s", type=float, default=10.0, help="how long to wait for the replicas")


def watch(conf: ModelMgrConfig) -> int:
    log = daemon.setup_logging("modelmgr", conf.log_level)
    repo = Repository(conf.repo, conf.model_name)
    writer = writer_lock(repo, f"model {conf.model_name!r} in {conf.repo}", conf.writer_lease_s)
    writer.take("model manager")  # before the Publisher, whose start removes unfinished versions
    gate = QualityGate(
        min_samples=conf.min_samples,
        max_auc_drop=conf.max_auc_drop,
        min_auc=conf.min_auc,
        max_logloss=conf.max_logloss,
        calibration_low=conf.calibration_low,
        calibration_high=conf.calibration_high,
        rollback_auc_drop=conf.rollback_auc_drop,
        rollback_z=conf.rollback_z,
    )
    publisher = Publisher(
        repo,
        Path(conf.exports),
        gate,
        conf.compact_after,
        conf.keep_full,
        conf.accept_new_spec,
        conf.keep_exports,
        conf.keep_rejections,
    )
    guarded = daemon.guard(conf, conf.host, service_policy(ADMIN_ROLES))  # also its identity for the notifications
    manager = Manager(repo, publisher, Notifier(conf.notify, conf.model_name))
    served = daemon.serve(
        conf,
        "modelmgr",
        lambda s: modelmgr_pb2_grpc.add_ModelAdminServicer_to_server(ModelAdminServicer(manager), s),
        [ADMIN_SERVICE],
        guarded,
    )
    served.ready()
    port = served.port
    writer.announce("model manager", f"{conf.host}:{port}")
    metrics_port = daemon.metrics_server(conf.host, conf.metrics_port)
    stop = daemon.stop_requested()
    log.info(
        "watching %s, publishing into %s/%s; admin service on %s:%d", conf.exports, conf.repo, conf.model_name, conf.host, port
    )
    daemon.write_ready_file(conf.ready_file, grpc_port=port, metrics_port=metrics_port)
    code = 0
    scans, paused = RepeatedError(log), RepeatedError(log)
    while not stop.is_set():
        lost = writer.lost()
        if lost is not None and writer.lapsed():  # S3 away: nothing is written until the lease is held again
            try:
                writer.retake()
            except WriterBusy as e:
                lost = str(e)
            except Exception as e:  # noqa: BLE001 - S3 still away (OSError), or answering with errors
                paused.failed(f"{lost}; publishing pauses until the lease is taken again ({e})")
                stop.wait(conf.poll_s)
                continue
            else:
                paused.passed("the lease is held again; publishing goes on")
                lost = None
        if lost is not None:  # another host's manager writes this model now: publishing on would race it
            log.error("%s; this manager stops", lost)
            code = 1
            break
        try:
            manager.scan()
        except Exception as e:  # noqa: BLE001 - a full disk, a damaged repository: retry, never die
            scans.failed(f"scan failed: {e}")
        else:
            scans.passed("the exports and the repository are scanned again")
        stop.wait(conf.poll_s)
    served.stop(grace_s=1)
    writer.release()
    return code


def run(args: argparse.Namespace) -> int:
    if args.action == "watch":
        conf = cfg.build(ModelMgrConfig, ENV_PREFIX, args)
        cfg.check_outputs(conf)
        return watch(conf)
    if args.action in REMOTE and args.manager:
        return _remote(args)
    if args.action == "publish":
        print("boundless model publish: error: --manager (or BOUNDLESS_MANAGER) names the manager daemon to publish")
        return 2
    if "://" not in args.repo and not Path(args.repo, args.model_name).is_dir():
        found = sorted(p.name for p in Path(args.repo).iterdir() if p.is_dir()) if Path(args.repo).is_dir() else []
        where = f"; it holds {', '.join(found)} (--model-name)" if found else ""
        what = f"--repo {args.repo}: no model {args.model_name!r} there{where}"
        print(f"boundless model {args.action}: error: {what}", file=sys.stderr)
        return 2
    repo = Repository(args.repo, args.model_name)
    try:
        if args.action == "list":
            return _list(repo, args.json)
        if args.action in ("gc", "show", "diff", "status"):
            from modelmgr.commands import inspect_cli

            if args.action == "gc" and not args.dry_run:  # removes versions: not under a running manager's feet
                with writer_lock(repo, f"model {args.model_name!r} in {args.repo}", WRITER_LEASE_S).held("boundless model gc"):
                    return inspect_cli.run(repo, args)
            return inspect_cli.run(repo, args)
        if args.action == "pin":
            actions.pin(repo, args.version, args.reason)
        elif args.action == "unpin":
            actions.unpin(repo)
        elif args.action == "rollback":
            actions.rollback(repo, args.version, args.reason or "rollback from the CLI")
        elif args.action == "promote":
            from modelmgr.commands import promote

            totals, why_not = promote.promote(
                repo, args.label, _split_addresses(args.serving), args.min_shadow, args.max_mean_abs_diff, args.dry_run
            )
            print(f"{args.model_name}: shadow evidence {totals.describe()}")
            if why_not is not None:
                print(f"boundless model promote: not promoted: {why_not}")
                return 2
            if args.dry_run:
                print(f"would promote {args.label} (dry run: nothing changed)")
                return 0
            print(f"promoted {args.label}: version {totals.evidence.version} is stable, the label is removed")
        elif args.action in ("label", "unlabel"):
            if args.action == "label":
                labels = repo.set_label(args.label, args.version, args.share, args.shadow)
            else:
                labels = repo.remove_label(args.label)
            shown = ", ".join(f"{n}={e.version} (share {e.share:g}, shadow {e.shadow:g})" for n, e in labels.items())
            print(f"{args.model_name}: labels {shown or 'none'}; stable is the policy's version ({repo.policy().describe()})")
            return 0
    except RepositoryError as e:
        print(f"boundless model {args.action}: error: {e}")
        return 2
    target = repo.target()
    print(f"{args.model_name}: policy {repo.policy().describe()}, serving should load version {target}")
    return _wait(args, target)


def _split_addresses(text: str) -> list[str]:
    return [a for a in text.split(",") if a]


def _wait(args: argparse.Namespace, target: int | None) -> int:
    if not args.serving:
        return 0
    from modelmgr.commands import inspect_cli

    return inspect_cli.wait_for(args.serving, target, args.wait_s, args.model_name)


def _remote(args: argparse.Namespace) -> int:
    """The command through the manager daemon's admin service."""
    import grpc

    from modelmgr.commands.admin_client import AdminClient

    client = AdminClient(args.manager, args.model_name)
    try:
        if args.action == "gc":
            from modelmgr.commands.inspect_cli import report_gc

            return report_gc(client.gc(args.keep_full, args.dry_run), args.dry_run, args.json)
        if args.action == "publish":
            done = client.publish(args.export_id)
            print(f"published versions {done.versions or 'none'}")
            if args.export_id:
                if done.rejected:
                    print(f"export {args.export_id} was rejected: {done.rejected}")
                    return 1
                if done.version is None:
                    print(f"export {args.export_id} is not published yet (the manager's log says why)")
                    return 1
                print(f"export {args.export_id} is version {done.version}")
            return 0
        if args.action == "pin":
            state = client.pin(args.version, args.reason)
        elif args.action == "unpin":
            state = client.unpin()
        else:
            state = client.rollback(args.version, args.reason or "rollback from the CLI")
    except grpc.RpcError as e:
        print(f"boundless model {args.action}: error: {e.code().name}: {e.details()}")  # type: ignore[attr-defined]
        return 2
    finally:
        client.close()
    print(
        f"{state.model}: policy {state.policy}, serving should load version {state.target} "
        f"({state.replicas_notified} replicas notified)"
    )
    return _wait(args, state.target)


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
        print(strict_json.dumps(doc, indent=1))
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
