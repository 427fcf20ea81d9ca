import argparse

import pytest

from ctr.runtime.config import ConfigError, add_arguments, build
from ps.config import PSConfig


def test_precedence_defaults_yaml_env_flags(tmp_path):
    y = tmp_path / "ps.yaml"
    y.write_text("shard_count: 4\ngrpc_threads: 2\nport: 7000\n")
    p = argparse.ArgumentParser(allow_abbrev=False)
    add_arguments(p, PSConfig)
    args = p.parse_args(["--config", str(y), "--port", "7100"])
    conf = build(PSConfig, "BOUNDLESS_PS_", args, environ={"BOUNDLESS_PS_GRPC_THREADS": "3"})
    assert (conf.shard_count, conf.grpc_threads, conf.port, conf.host) == (4, 3, 7100, "127.0.0.1")


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


def test_a_renamed_setting_is_refused_with_its_new_name(tmp_path):
    y = tmp_path / "ps.yaml"
    y.write_text("workers: 2\n")
    with pytest.raises(ConfigError, match="setting 'workers' is now 'grpc_threads'"):
        build(PSConfig, "X_", yaml_path=y, environ={})
    with pytest.raises(ConfigError, match="BOUNDLESS_PS_TOKENS_FILE: setting 'tokens_file' is now 'accepted_tokens_file'"):
        build(PSConfig, "BOUNDLESS_PS_", environ={"BOUNDLESS_PS_TOKENS_FILE": "t.yaml"})


@pytest.mark.parametrize(
    ("command", "old", "new"),
    [
        ("ps", "--workers", "--grpc-threads"),
        ("serve", "--workers", "--grpc-threads"),
        ("model watch", "--tokens-file", "--accepted-tokens-file"),
        ("train", "--full-every", "--full-export-every"),
        ("serve", "--shard", "--shard-index"),
        ("serve", "--shards", "--shard-replicas"),
        ("demo", "--shards", "--ps-shards"),
    ],
)
def test_a_renamed_flag_is_refused_naming_the_new_one(capsys, command, old, new):
    from boundless.cli import main

    with pytest.raises(SystemExit):
        main([*command.split(), f"{old}=2"])
    assert f"{old} is now {new}" in capsys.readouterr().err


def test_every_daemon_config_checks_itself():
    from serving.config import ServingConfig

    with pytest.raises(ConfigError, match="--shard-index 2: must be 0..1"):
        build(PSConfig, "X_", environ={"X_SHARD_INDEX": "2", "X_SHARD_COUNT": "2"})
    for config in (PSConfig, ServingConfig):  # not "--shard-index 0: must be 0..-1"
        with pytest.raises(ConfigError, match="--shard-count 0: must be at least 1"):
            build(config, "X_", environ={"X_SHARD_COUNT": "0"})
    with pytest.raises(ConfigError, match="--router and --shard-count exclude each other"):
        build(ServingConfig, "X_", environ={"X_ROUTER": "1", "X_SHARD_COUNT": "2"})
    with pytest.raises(ConfigError, match="X_SHARD: setting 'shard' is now 'shard_index'"):
        build(ServingConfig, "X_", environ={"X_ROUTER": "1", "X_SHARD": "0/2"})
    with pytest.raises(ConfigError, match="--grpc-threads 0"):
        build(ServingConfig, "X_", environ={"X_GRPC_THREADS": "0"})


def test_sections_take_flat_names_or_nested_yaml_and_check_themselves_with_their_flags(tmp_path):
    from trainer.config import TrainerConfig

    y = tmp_path / "trainer.yaml"
    y.write_text("learner: {model: fm, k: 4}\nbatch_size: 64\nlocal_ps: {shards: 2, lifecycle: {admit_after: 3}}\n")
    conf = build(TrainerConfig, "X_", yaml_path=y, environ={"X_LOCAL_TTL_S": "5", "X_WORKERS": "1"})
    assert (conf.learner.model, conf.learner.k, conf.learner.batch_size) == ("fm", 4, 64)
    assert (conf.local_ps.shards, conf.local_ps.lifecycle.admit_after, conf.local_ps.lifecycle.ttl_s) == (2, 3, 5.0)
    assert conf.local_ps.lifecycle.policy().admit_after == 3
    y.write_text("learner: {nonsense: 1}\n")
    with pytest.raises(ConfigError, match="learner: unknown setting 'nonsense'"):
        build(TrainerConfig, "X_", yaml_path=y, environ={})
    # the same section checks itself under each daemon's flag names
    with pytest.raises(ConfigError, match="--local-bloom-mb 0: must be >= 1"):
        build(TrainerConfig, "X_", environ={"X_LOCAL_BLOOM_MB": "0"})
    with pytest.raises(ConfigError, match="--bloom-mb 0: must be >= 1"):
        build(PSConfig, "X_", environ={"X_BLOOM_MB": "0"})
    with pytest.raises(ConfigError, match="are for --ps local"):
        build(TrainerConfig, "X_", environ={"X_PS": "127.0.0.1:1", "X_LOCAL_MAX_ROWS": "5"})


def test_two_settings_with_one_flat_name_are_refused():
    from dataclasses import dataclass, field

    from ctr.runtime.config import section, settings

    @dataclass(frozen=True)
    class Part:
        port: int = field(default=0)

    @dataclass(frozen=True)
    class Clash:
        port: int = field(default=0)
        part: Part = section(Part, "part")

    with pytest.raises(TypeError, match="two settings share a name: \\['port'\\]"):
        settings(Clash)


def test_a_config_rendered_as_flags_builds_the_same_config():
    """A supervisor starts its serving processes with its own config as flags (serving.process_group)."""
    from ctr.runtime.config import to_flags
    from serving.config import ServingConfig

    p = argparse.ArgumentParser(allow_abbrev=False)
    add_arguments(p, ServingConfig)
    conf = build(
        ServingConfig, "X_", p.parse_args(["--repo", "r x", "--processes", "3", "--strict-features", "--poll-s", "0.25"])
    )
    again = build(ServingConfig, "X_", p.parse_args(to_flags(conf)), environ={})
    assert again == conf and again.processes == 3 and again.strict_features and again.repo == "r x"


def test_the_paths_a_daemon_writes_are_made_or_refused_at_start_naming_the_flag(tmp_path):
    """Before: a trainer trained to the end and then failed on --metrics-out's folder, and
    every daemon's bad folder came out as a bare "[Errno 2] ... '/x'" with no flag."""
    from ctr.runtime.config import check_outputs
    from serving.config import ServingConfig
    from trainer.config import TrainerConfig

    conf = build(
        TrainerConfig,
        "X_",
        environ={"X_EXPORT_DIR": str(tmp_path / "a/exports"), "X_METRICS_OUT": str(tmp_path / "b/c/m.json")},
    )
    check_outputs(conf)
    assert (tmp_path / "a/exports").is_dir() and (tmp_path / "b/c").is_dir() and not (tmp_path / "b/c/m.json").exists()
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    cases = {
        "X_METRICS_OUT": (str(blocker / "m.json"), rf"--metrics-out {blocker}/m.json: {blocker} is a file, where a folder"),
        "X_EXPORT_DIR": (str(blocker), rf"--export-dir {blocker}: {blocker} is a file, where a folder is needed"),
        "X_CURVE_OUT": (str(tmp_path), rf"--curve-out {tmp_path}: a folder, where a file is to be written"),
        "X_READY_FILE": ("/proc/none/r.json", r"--ready-file /proc/none/r.json: the folder /proc/none cannot be made"),
    }
    for var, (value, message) in cases.items():
        with pytest.raises(ConfigError, match=message):
            check_outputs(build(TrainerConfig, "X_", environ={var: value}))
    with pytest.raises(ConfigError, match="--copies-dir"):
        check_outputs(build(ServingConfig, "X_", environ={"X_COPIES_DIR": str(blocker)}))
    from modelmgr.config import ModelMgrConfig

    with pytest.raises(ConfigError, match=rf"--exports {blocker}: {blocker} is a file"):  # it watched a file, silent
        check_outputs(build(ModelMgrConfig, "X_", environ={"X_EXPORTS": str(blocker), "X_REPO": str(tmp_path / "r")}))
    check_outputs(build(TrainerConfig, "X_", environ={"X_EXPORT_DIR": "s3://bucket/exports"}))  # left to its client


def test_an_environment_variable_of_no_setting_is_said_with_the_closest_and_service_links_are_not(capsys):
    env = {
        "BOUNDLESS_PS_SHARD_COUNT": "2",
        "BOUNDLESS_PS_SHARD_CONT": "3",  # a typo in a pod spec: ignored before without a word
        "BOUNDLESS_PS_SERVICE_HOST": "10.0.0.1",  # Kubernetes' links for a Service named boundless-ps
        "BOUNDLESS_PS_PORT_7000_TCP": "tcp://10.0.0.1:7000",
    }
    conf = build(PSConfig, "BOUNDLESS_PS_", environ=env)
    assert conf.shard_count == 2
    err = capsys.readouterr().err
    assert "environment BOUNDLESS_PS_SHARD_CONT: no such setting (did you mean BOUNDLESS_PS_SHARD_COUNT?); ignored" in err
    assert "SERVICE_HOST" not in err and "7000_TCP" not in err
