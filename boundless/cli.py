"""`boundless` command line: ps, train, model, serve, predict, demo, report, certs."""

from __future__ import annotations

import argparse
import difflib
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from boundless.processes import die_with_parent
from ctr.runtime.extras import missing_extra

# subcommand -> (module with add_arguments/run, help); only the module of the command
# given is imported, so `boundless model list` does not pay for numba, and `train` for
# the serving stack (process start-up counts in the trainer's speed).
COMMANDS: dict[str, tuple[str, str]] = {
    "ps": ("ps.cli", "run one parameter-server shard"),
    "train": ("trainer.cli", "stream samples and train through the PS"),
    "model": ("modelmgr.cli", "model manager daemon and version commands (list, rollback, pin, unpin)"),
    "serve": ("serving.daemon", "run the gRPC prediction service"),
    "predict": ("serving.client.predict_cli", "score samples from a file through a serving process"),
    "eval": ("modelmgr.commands.eval_cli", "score a published version on a file offline: AUC, logloss, calibration"),
    "demo": ("boundless.launcher", "run the whole platform on one machine on a synthetic stream"),
    "report": ("boundless.report", "draw a run's training curves, latency histograms and versions as PNGs"),
    "certs": ("boundless.certs", "make a local CA, TLS certificates and bearer tokens for a test deployment"),
}


# flags renamed so that one name means one thing on every command; the old spelling is
# refused with the new one named
# (a command has at most one of a flag's new names)
RENAMED: dict[str, tuple[tuple[str, str], ...]] = {
    "--model": (("--model-name", "the model's name; --model is the model type, of train and demo only"),),
    "--workers": (("--grpc-threads", "gRPC threads; --workers is the trainer's local ranks"),),
    "--tokens-file": (("--accepted-tokens-file", "the tokens a server accepts, beside --token-file, this process's own"),),
    "--full-every": (("--full-export-every", "every Nth export is full; --full-checkpoint-every is the PS's cuts"),),
    "--shard": (("--shard-index", "with --shard-count: --shard-index I --shard-count N, as boundless ps takes them"),),
    "--shards": (
        ("--shard-replicas", "the router's list of each serving shard's replicas"),
        ("--ps-shards", "how many PS shard processes the demo starts"),
    ),
}


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every flag of a parser and of its subparsers."""
    out = [o for o in parser._option_string_actions if o.startswith("--")]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out += option_strings(sub)
    return out


class Parser(argparse.ArgumentParser):
    """argparse with no abbreviations, and a hint for a mistyped or renamed flag."""

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        known = list(dict.fromkeys(option_strings(self)))
        hints = []
        for token in message.replace(",", " ").split():
            flag = token.split("=", 1)[0].rstrip(":;.'\"")  # argparse writes "argument --share: ..."
            if not flag.startswith("--") or flag in known:
                continue
            renamed = [(new, why) for new, why in RENAMED.get(flag, ()) if new in known]
            if renamed:
                hints.append(f"{flag} is now {renamed[0][0]} ({renamed[0][1]})")
                continue
            close = difflib.get_close_matches(flag, [k for k in known if k != "--help"], n=1, cutoff=0.7)
            if close:
                hints.append(f"{flag}: did you mean {close[0]}?")
        super().error(message + "".join(f"\n  {h}" for h in hints))


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only `command`'s subparser gets its arguments (and imports its module)."""
    parser = Parser(prog="boundless", description="Online CTR training and serving.", allow_abbrev=False)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, allow_abbrev=False)
        if name == command:
            importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def command_parser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    """The subparser of `command`."""
    actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return actions[0].choices[command]  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> int:
    die_with_parent()  # a daemon a launcher started ends with it (boundless.processes.start)
    args_in = sys.argv[1:] if argv is None else list(argv)
    try:
        parser = build_parser(next((a for a in args_in if a in COMMANDS), None))
        args, unknown = parser.parse_known_args(args_in)
        if unknown:  # said by the command's own parser: its usage, and hints from its flags
            command_parser(parser, args.command).error(f"unrecognized arguments: {' '.join(unknown)}")
        run: Callable[[argparse.Namespace], int] = importlib.import_module(args._module).run
        return run(args)
    except KeyboardInterrupt:
        return 130
    except ImportError as e:
        hint = missing_extra(e)
        if hint is None:
            raise
        print(f"boundless: {hint}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"boundless {args_in[0] if args_in else ''}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
