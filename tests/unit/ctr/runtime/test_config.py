import argparse

import pytest

from ctr.runtime.config import ConfigError, add_arguments, build
from ps.config import PSConfig


def test_precedence_defaults_yaml_env_flags(tmp_path):
    y = tmp_path / "ps.yaml"
    y.write_text("shard_count: 4\nworkers: 2\nport: 7000\n")
    p = argparse.ArgumentParser(allow_abbrev=False)
    add_arguments(p, PSConfig)
    args = p.parse_args(["--config", str(y), "--port", "7100"])
    conf = build(PSConfig, "BOUNDLESS_PS_", args, environ={"BOUNDLESS_PS_WORKERS": "3"})
    assert (conf.shard_count, conf.workers, conf.port, conf.host) == (4, 3, 7100, "127.0.0.1")


def test_bad_values_name_their_source(tmp_path):
    y = tmp_path / "ps.yaml"
    y.write_text("nonsense: 1\n")
    with pytest.raises(ConfigError, match="unknown setting 'nonsense'"):
        build(PSConfig, "X_", yaml_path=y, environ={})
    with pytest.raises(ConfigError, match="BOUNDLESS_PS_PORT"):
        build(PSConfig, "BOUNDLESS_PS_", environ={"BOUNDLESS_PS_PORT": "abc"})


def test_the_command_line_refuses_abbreviated_flags(capsys):
    from boundless.cli import build_parser

    parser = build_parser("train")
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--mod", "ffm"])  # must not silently mean --model (or --model-name)
    assert "unrecognized arguments: --mod" in capsys.readouterr().err
    assert parser.parse_args(["train", "--model", "ffm"]).model == "ffm"
