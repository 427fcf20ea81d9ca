"""What the ranks of a group must share: the settings compared with rank 0's before they
train together, and whether every rank reaches rank 0's shard processes
(trainer.run.agreement; docs/design/ranks.md, "Ranks that disagree")."""

from __future__ import annotations

from pathlib import Path

import pytest

from boundless.cli import build_parser
from ctr.runtime import config as cfg
from trainer.config import ENV_PREFIX, TrainerConfig
from trainer.run.agreement import disagreement_message, disagreements, folders_verdict, group_settings, shards_verdict

PS = ("--ps", "10.0.0.1:7000,10.0.0.2:7000")


def _settings(*flags: str, source: str = "/data/stream", world: int = 2) -> dict[str, str]:
    args = build_parser("train").parse_args(["train", "--source", source, *PS, *flags])
    return group_settings(cfg.build(TrainerConfig, ENV_PREFIX, args, environ={}), world)


def test_ranks_with_the_same_training_flags_agree_whatever_each_hosts_own_settings():
    lead = _settings("--model", "deepfm", "--device", "cpu", "--metrics-out", "r0.json")
    other = _settings(
        *("--model", "deepfm", "--device", "cuda", "--metrics-out", "r1.json", "--metrics-port", "9100"),
        *("--pull-cache-rows", "1000", "--residual-rows", "5000", "--log-level", "debug"),
        source="/mnt/elsewhere/stream",  # the same folder, mounted elsewhere on this host
    )
    assert disagreements(lead, other) == []


@pytest.mark.parametrize(
    ("flags", "found"),
    [
        (("--model", "fm"), ["--model fm (rank 0: lr)"]),
        (("--k", "16", "--hidden", "200,200"), ["--k 16 (rank 0: 8)", "--hidden 200,200 (rank 0: 400,400,400)"]),
        (("--batch-size", "256"), ["--batch-size 256 (rank 0: 0)"]),
        (("--opt-w", "ftrl lr=0.1"), ["--opt-w ftrl lr=0.1 (rank 0: )"]),
        (("--push-codec", "onebit"), ["--push-codec onebit (rank 0: auto)"]),
        (("--staleness", "4"), ["--staleness 4 (rank 0: 0)"]),
        (("--model-name", "other"), ["--model-name other (rank 0: ctr)"]),
        (("--max-samples", "1000"), ["--max-samples 1000 (rank 0: 0)"]),
        (("--no-follow",), ["--follow False (rank 0: True)"]),
    ],
)
def test_a_training_flag_that_differs_is_named_with_both_values(tmp_path, flags, found):
    folder = str(tmp_path)
    assert disagreements(_settings(source=folder), _settings(*flags, source=folder)) == found


def test_the_group_size_the_shard_count_and_a_topic_are_compared():
    assert disagreements(_settings(), _settings(world=3)) == ["--world-size 3 (rank 0: 2)"]
    assert disagreements(_settings(), _settings("--ps", "10.0.0.1:7000")) == ["--ps 1 shards (rank 0: 2 shards)"]
    topic = _settings(source="kafka://broker:9092/clicks")
    assert disagreements(topic, _settings(source="kafka://broker:9092/views")) == [
        "--source kafka://broker:9092/views (rank 0: kafka://broker:9092/clicks)"
    ]


def test_a_schema_is_compared_by_its_content_not_its_path(tmp_path: Path):
    a, b, c = tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "c.yaml"
    a.write_text("label: click\n")
    b.write_text("label: click\n")
    c.write_text("label: clicked\n")
    assert disagreements(_settings("--schema", str(a)), _settings("--schema", str(b))) == []
    assert [d.split(" ")[0] for d in disagreements(_settings("--schema", str(a)), _settings("--schema", str(c)))] == ["--schema"]


def test_the_message_names_the_rank_and_every_difference():
    text = disagreement_message(3, ["--model fm (rank 0: lr)", "--k 16 (rank 0: 8)"])
    assert text.startswith("rank 3 was started with settings other than rank 0's: --model fm (rank 0: lr); --k 16 (rank 0: 8).")


def test_ranks_reach_rank_0s_shards_by_their_processes_not_their_names():
    lead = (["10.0.0.1:7000", "10.0.0.2:7000"], [11, 12])
    assert shards_verdict([lead, (["ps-0.ps:7000", "ps-1.ps:7000"], [11, 12])]) == "same"
    assert shards_verdict([lead, (lead[0], [11, 13])]) == "restarted"  # shard 1 restarted between the looks
    verdict = shards_verdict([lead, (lead[0], [11, 12]), (["10.9.0.1:7000", "10.9.0.2:7000"], [21, 22])])
    assert verdict.startswith("--ps: rank 2 reaches other shard processes (10.9.0.1:7000,10.9.0.2:7000) than rank 0")


def test_ranks_on_folders_that_share_no_file_are_refused():
    shared = ["a.txt", "b.txt", "c.txt"]
    assert folders_verdict([shared, shared[1:] + ["d.txt"]]) == ""  # one folder, listed a moment apart
    assert folders_verdict([[], []]) == ""  # nothing landed yet
    assert folders_verdict([shared, ["x.txt"]]).startswith("--source: rank 1's folder holds 1 file and rank 0's 3")
    assert folders_verdict([shared, shared, []]).startswith("--source: rank 2's folder holds 0 files")  # not mounted
