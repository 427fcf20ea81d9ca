"""`boundless ps`: run one shard (ps.server.daemon), or `ps stats` of running shards
(ps.client.stats_cli). Each side loads only when its command runs."""

from __future__ import annotations

import argparse

from ctr.runtime import config as cfg
from ps.config import HELP_EXAMPLES, HELP_GROUPS, PSConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    cfg.add_arguments(parser, PSConfig, HELP_GROUPS, HELP_EXAMPLES)
    sub = parser.add_subparsers(dest="action", metavar="stats")  # none: run a shard
    stats = sub.add_parser("stats", help="tables, digests and samples of running shards", allow_abbrev=False)
    stats.add_argument("addresses", help="the shards, HOST:PORT[,HOST:PORT...]")
    stats.add_argument("--json", action="store_true", help="print JSON")


def run(args: argparse.Namespace) -> int:
    if getattr(args, "action", None) == "stats":
        from ps.client.stats_cli import show

        return show(args.addresses, args.json)
    from ps.server import daemon

    return daemon.run(args)
