"""Expected failures end with a one-line message naming the setting, the address or the
file, and a non-zero exit: never a traceback, never a run that trains nothing and says 0."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from pathlib import Path

from boundless.processes import start
from tests.support import wait_until


def _boundless(*args: str, stdin: str | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "boundless", *args], capture_output=True, text=True, timeout=180, input=stdin, cwd=cwd
    )


def _train(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return _boundless("train", "--metrics-port", "-1", "--port", "-1", *args, stdin=stdin)


def _refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode != 0, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for w in words:
        assert w in proc.stderr, (w, proc.stderr[-2000:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_training_input_that_cannot_train_is_refused_with_its_cause(data_dir: Path, tmp_path: Path):
    _refused(_train("--source", str(tmp_path / "nope.tsv")), "--source", "no such file or folder")
    empty = tmp_path / "empty.tsv"
    empty.write_text("")
    _refused(_train("--source", str(empty), "--format", "criteo"), "no sample line came")
    libffm = data_dir / "criteo_small/xlearn_small_train.txt"
    wrong = _train("--source", str(libffm), "--format", "criteo")
    _refused(wrong, "bad lines", "likely cause: the lines look like libffm", f"{libffm}:1:")
    assert wrong.stderr.count("WARNING") <= 12  # ten bad lines, then one in a thousand

    csv = tmp_path / "clicks.csv"
    rows = (data_dir / "avazu_10k/train_rows1-9999.csv").read_text().splitlines()[:3001]
    csv.write_text("\n".join([rows[0].replace("click", "clicked_it"), *rows[1:]]) + "\n")
    _refused(_train("--source", str(csv)), "no label column", "--label")
    out = tmp_path / "m.json"
    ok = _train("--source", str(csv), "--label", "clicked_it", "--metrics-out", str(out))
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert json.loads(out.read_text())["samples"] == 3000
    assert "trained 3,000 samples" in ok.stderr  # the closing summary is for a person


def test_commands_name_what_is_wrong(data_dir: Path, tmp_path: Path):
    dead = f"127.0.0.1:{_free_port()}"
    _refused(_boundless("predict", "--address", dead, "--data", str(data_dir / "criteo_10k/train_rows1-10000.tsv"),
                        "--timeout-s", "2"), f"serving at {dead}", "UNAVAILABLE")  # fmt: skip
    _refused(_boundless("model", "list", "--repo", str(tmp_path / "nosuchrepo")), "no model 'ctr'")
    _refused(_boundless("eval", "--repo", str(tmp_path / "nosuchrepo"), "--data", "x.tsv"), "--repo")
    _refused(_boundless("serve", "--model", "ctr"), "--model is now --model-name")
    _refused(_boundless("train", "--sourc", "x"), "did you mean --source?")
    # the command's own usage, and no hint that is only a similar spelling of --help
    label = _boundless("predict", "--address", dead, "--data", "x.csv", "--label", "click")
    _refused(label, "usage: boundless predict", "boundless predict: error: unrecognized arguments: --label click")
    assert "did you mean" not in label.stderr
    # a value out of range names the flag, and no hint that a flag is misspelt ("--share:")
    share = _boundless("model", "label", "canary", "1", "--share", "1.5", "--repo", str(tmp_path / "nosuchrepo"))
    _refused(share, "argument --share: 1.5 is not a share from 0 to 1")
    assert "did you mean" not in share.stderr
    helped = _boundless("train", "--help")
    assert helped.returncode == 0 and "essential:" in helped.stdout and "examples:" in helped.stdout


def test_serving_runs_without_metrics_and_the_trainer_checks_the_export_root(platform, data_dir: Path, tmp_path: Path):
    serving = start("serving-nometrics", ["serve", "--repo", str(tmp_path / "repo"), "--metrics-port", "-1"], tmp_path)
    try:
        assert serving.wait_ready()["metrics_port"] == -1
    finally:
        serving.stop()
    elsewhere = platform.train(data_dir / "criteo_10k/train_rows1-10000.tsv", "--export-dir", str(tmp_path / "elsewhere"))
    _refused(elsewhere, "--export-dir", "--export-root")
    assert not (tmp_path / "elsewhere").exists() or not any((tmp_path / "elsewhere").iterdir())


def test_a_figure_without_a_value_is_null_in_the_metrics_json(tmp_path: Path) -> None:
    """One class in the window has no AUC: the metrics file says null, which every JSON
    reader takes (Python's own default would write NaN, which jq and JSON.parse refuse)."""
    source = tmp_path / "negatives.csv"
    source.write_text("clicked,a\n" + "".join(f"0,{i % 7}\n" for i in range(500)))
    out = tmp_path / "m.json"
    proc = _train("--source", str(source), "--metrics-out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} in {out}")

    doc = json.loads(out.read_text(), parse_constant=refuse)
    assert doc["window_auc"] is None and doc["samples"] == 500


def test_scoring_a_file_of_another_models_columns_is_refused_naming_them(platform, data_dir: Path, tmp_path: Path) -> None:
    """eval and predict parse a file under the version's field list: a file none of whose
    columns is a field of the model scored every sample as a constant (AUC 0.5) and said
    nothing; one extra column is said and scored as absent."""
    from ctr.repository.versions import Repository

    lines = (data_dir / "avazu_10k/train_rows1-9999.csv").read_text().splitlines()
    train = tmp_path / "avazu.csv"
    train.write_text("\n".join(lines[:6001]) + "\n")
    trained = platform.train(train, "--model", "lr")
    assert trained.returncode == 0, trained.stderr[-3000:]
    repo = Repository(platform.dir / "repo", "ctr")
    wait_until("a version published", lambda: bool(repo.versions()), 60)
    other = tmp_path / "other.csv"
    other.write_text("click,foo,bar\n" + "".join(f"{i % 2},x{i % 7},y{i % 5}\n" for i in range(300)))
    extra = tmp_path / "extra.csv"
    header, rows = lines[0], lines[6001:6400]
    extra.write_text("\n".join([header + ",foo", *(r + f",z{i % 3}" for i, r in enumerate(rows))]) + "\n")
    for command in (["eval", "--repo", str(platform.dir / "repo")], ["predict", "--address", platform.serving.address]):
        _refused(_boundless(*command, "--data", str(other)), "none of its features is of a field model 'ctr' has", "bar, foo")
        scored = _boundless(*command, "--data", str(extra))
        assert scored.returncode == 0, scored.stderr[-2000:]
        assert f"dropped {len(rows)} features of fields model 'ctr' does not have: foo (scored as absent)" in scored.stderr


def test_two_label_columns_are_refused_and_one_named_warns_of_the_other(tmp_path: Path) -> None:
    rows = ["click,y,site", *(f"{i % 3 == 0:d},{i % 3 == 0:d},s{i % 7}" for i in range(300))]
    (tmp_path / "two.csv").write_text("\n".join(rows) + "\n")
    _refused(_train("--source", str(tmp_path / "two.csv"), "--ps", "local"), "several label columns (click, y)", "--label")
    named = _train("--source", str(tmp_path / "two.csv"), "--ps", "local", "--label", "click")
    assert named.returncode == 0, named.stderr[-2000:]
    assert "column(s) y train as features beside the label 'click'" in named.stderr and "skip: [y]" in named.stderr


def test_a_field_that_gives_the_label_away_is_warned_of(data_dir: Path, tmp_path: Path) -> None:
    """A column known only after the click (a conversion's type, blank otherwise): trained as
    a feature it makes the progressive AUC near 1.0, and serving never has it."""
    lines = (data_dir / "avazu_10k/train_rows1-9999.csv").read_text().splitlines()[:3001]
    header, rows = lines[0].split(","), [r.split(",") for r in lines[1:]]
    at = header.index("click")
    leaked = [",".join([*header, "conversion"])]
    leaked += [",".join([*r, "buy" if r[at] == "1" else ""]) for r in rows]
    (tmp_path / "leak.csv").write_text("\n".join(leaked) + "\n")
    run = _train("--source", str(tmp_path / "leak.csv"), "--ps", "local")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "field(s) conversion give the label away" in run.stderr and "skip: [conversion]" in run.stderr
    clean = _train("--source", str(data_dir / "avazu_10k/train_rows1-9999.csv"), "--ps", "local")
    assert clean.returncode == 0 and "give the label away" not in clean.stderr


def test_training_from_a_terminal_says_it_reads_standard_input(tmp_path: Path) -> None:
    """`boundless train` with no --source reads standard input; from a terminal it waited in
    silence, and a new user saw a command that hung. It now says where it reads and how to
    end or point it elsewhere; a pipe (the usual `cat | boundless train`) is told nothing."""
    import os
    import pty

    cmd = [sys.executable, "-m", "boundless", "train", "--ps", "local", "--metrics-port", "-1"]
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(cmd, stdin=follower, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.close(follower)
        os.write(leader, b"1 3:1 5:1\n0 3:1\n\x04")  # two lines, then Ctrl-D
        _, err = proc.communicate(timeout=120)
    finally:
        os.close(leader)
    assert "reading samples from standard input, a terminal: type or paste lines, Ctrl-D ends" in err, err[-2000:]
    piped = subprocess.run(cmd, input="1 3:1 5:1\n0 3:1\n", capture_output=True, text=True, timeout=120)
    assert piped.returncode == 0 and "a terminal" not in piped.stderr, piped.stderr[-2000:]


def test_a_field_of_measurements_trained_as_categories_is_warned_of(tmp_path: Path) -> None:
    """A column of full-precision decimals (a model score, a dwell time) trains one category
    per distinct value, each seen about once: said at start, with the schema setting that
    buckets it; ids, counts and prices to the cent are not warned of, nor a field the schema
    already buckets."""
    rng = random.Random(3)
    rows = ["clicked,score,uid,price,site"]
    rows += [
        f"{rng.random() < 0.2:d},{rng.random()!r},{rng.randrange(10**9)},{rng.randrange(500) / 100:.2f},s{rng.randrange(9)}"
        for _ in range(3000)
    ]
    (tmp_path / "m.csv").write_text("\n".join(rows) + "\n")
    run = _train("--source", str(tmp_path / "m.csv"), "--ps", "local")
    assert run.returncode == 0, run.stderr[-2000:]
    assert "field(s) score hold numbers that nearly all differ" in run.stderr and "numeric: [score]" in run.stderr
    (tmp_path / "s.yaml").write_text("format: csv\nlabel: clicked\nnumeric: [score]\n")
    bucketed = _train("--source", str(tmp_path / "m.csv"), "--ps", "local", "--schema", str(tmp_path / "s.yaml"))
    assert bucketed.returncode == 0 and "nearly all differ" not in bucketed.stderr, bucketed.stderr[-2000:]
