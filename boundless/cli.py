"""`boundless` command line: ps, train, model, serve, predict, demo, report, certs."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence

# subcommand -> (module with add_arguments/run, help); only the module of the command
# given is imported, so `boundless model list` does not pay for numba, and `train` for
# the serving stack (process start-up counts in the trainer's speed).
COMMANDS: dict[str, tuple[str, str]] = {
    "ps": ("ps.server", "run one parameter-server shard"),
    "train": ("trainer.cli", "stream samples and train through the PS"),
    "model": ("modelmgr.cli", "model manager daemon and version commands (list, rollback, pin, unpin)"),
    "serve": ("serving.server", "run the gRPC prediction service"),
    "predict": ("serving.predict_cli", "score samples from a file through a serving process"),
    "eval": ("modelmgr.eval_cli", "score a published version on a file offline: AUC, logloss, calibration"),
    "demo": ("boundless.launcher", "run the whole platform on one machine on a synthetic stream"),
    "report": ("boundless.report", "draw a run's training curves, latency histograms and versions as PNGs"),
    "certs": ("boundless.certs", "make a local CA, TLS certificates and bearer tokens for a test deployment"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s subparser gets its arguments (and imports its module)."""
    parser = argparse.ArgumentParser(prog="boundless", description="Online CTR training and serving.", allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        if name == command:
            importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(next((a for a in args_in if a in COMMANDS), None))
    args = parser.parse_args(args_in)
    run: Callable[[argparse.Namespace], int] = importlib.import_module(args._module).run
    try:
        return run(args)
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError) as e:
        print(f"boundless {args.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
