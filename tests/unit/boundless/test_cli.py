"""`--help` works for every command and subcommand: argparse expands %-formats in help
texts, so one config field whose help said "5%" made `boundless ps --help` a traceback."""

from __future__ import annotations

import argparse

import pytest

from boundless.cli import COMMANDS, build_parser


def _subcommands(parser: argparse.ArgumentParser) -> list[str]:
    return [name for a in parser._actions if isinstance(a, argparse._SubParsersAction) for name in a.choices]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_prints_its_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser(command)
    with pytest.raises(SystemExit) as e:
        parser.parse_args([command, "--help"])
    assert e.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: boundless {command}")
    command_parser = next(a.choices[command] for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for sub in _subcommands(command_parser):  # `boundless model rollback --help`, ...
        with pytest.raises(SystemExit) as e:
            parser.parse_args([command, sub, "--help"])
        assert e.value.code == 0, sub
        assert f"usage: boundless {command} {sub}" in capsys.readouterr().out
