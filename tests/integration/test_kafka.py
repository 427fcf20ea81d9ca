"""The trainer on a Kafka topic, against a real Kafka-protocol broker (Tansu)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from boundless.kafka_broker import KafkaBroker, produce_lines
from boundless.processes import start
from tests.support import wait_for_text
from trainer.run.rendezvous import EXIT_RESTART

TOPIC = "frappe"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    with KafkaBroker(tmp_path / "broker.log") as b:
        yield b


def train(*args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = Path(args[args.index("--metrics-out") + 1])
    cmd = [sys.executable, "-m", "boundless", "train", "--no-follow", "--metrics-port", "-1", "--format", "libsvm", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_kafka_topic_trains_like_the_same_lines_in_a_file(broker, data_dir, tmp_path):
    """Every message trains once, bad ones are reported with partition and offset, a
    checkpoint stores each partition's offset, and a restarted trainer trains only what came after."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:20000]
    lines[5] = "1 3:oops"  # partition 1, offset 2: reported as frappe[1]:3
    source = broker.create_topic(TOPIC, 2)
    produce_lines(broker.producer(), TOPIC, lines, 2)
    _, one = train("--source", source, "--local-shards", "2", "--metrics-out", str(tmp_path / "one.json"))
    assert one["samples"] == len(lines) - 1 and one["bad_lines"] == 1
    assert one["window_auc"] > 0.85

    shards = [
        start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(tmp_path / f"ps{i}")], tmp_path)
        for i in range(2)
    ]
    try:
        ps = ",".join(s.address for s in shards if s.wait_ready())
        proc, first = train(
            "--source", source, "--ps", ps, "--checkpoint-interval-s", "1000", "--metrics-out", str(tmp_path / "a.json")
        )
        assert "frappe[1]:3: feature 1: value 'oops' is not a number" in proc.stderr
        assert first["samples"] == len(lines) - 1
        more = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[20000:26000]
        produce_lines(broker.producer(), TOPIC, more, 2)
        proc, resumed = train("--source", source, "--ps", ps, "--metrics-out", str(tmp_path / "b.json"))
        assert "the stream takes up at" in proc.stderr and "'0': 10000" in proc.stderr
        assert resumed["samples"] == first["samples"] + len(more)  # the cut's metrics carry on
    finally:
        for s in shards:
            s.stop()


def test_a_topic_created_again_while_the_trainer_was_down_is_read_from_its_start(broker, data_dir, tmp_path):
    """The checkpoint's offsets name none of a topic deleted and created again: the new
    topic's messages are trained from its oldest, said and counted, where the trainer took
    its first messages as read and trained nothing (or waited, following, for offsets the new
    topic had yet to reach, then skipped what came before them)."""
    from confluent_kafka.admin import AdminClient

    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    source = broker.create_topic(TOPIC, 2)
    produce_lines(broker.producer(), TOPIC, lines[:4000], 2)
    shards = [
        start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(tmp_path / f"ps{i}")], tmp_path)
        for i in range(2)
    ]
    try:
        ps = ",".join(s.address for s in shards if s.wait_ready())
        _, first = train("--source", source, "--ps", ps, "--metrics-out", str(tmp_path / "a.json"))
        assert first["samples"] == 4000 and first["source_partitions_reset"] == 0
        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 4})
        for future in admin.delete_topics([TOPIC]).values():
            future.result(timeout=30)
        time.sleep(0.5)
        broker.create_topic(TOPIC, 2)
        produce_lines(broker.producer(), TOPIC, lines[4000:4600], 2)
        proc, again = train("--source", source, "--ps", ps, "--metrics-out", str(tmp_path / "b.json"))
        assert again["samples"] == 4600, again  # every message of the new topic, on from the cut's 4,000
        assert again["source_partitions_reset"] == 2 and again["source_messages_lost"] == 0
        assert "was deleted and created again since the checkpoint" in proc.stderr
        assert "frappe[0] 2000, frappe[1] 2000" in proc.stderr
        assert "2 partition(s) read again from their oldest message" in proc.stderr
        _, same = train("--source", source, "--ps", ps, "--metrics-out", str(tmp_path / "c.json"))
        assert same["samples"] == 4600 and same["source_partitions_reset"] == 0  # the cut names the new topic now
    finally:
        for s in shards:
            s.stop()


def test_client_settings_come_from_a_kafka_config_file_and_a_bad_one_is_named(broker, data_dir, tmp_path):
    """A secured cluster needs librdkafka's security settings, which --kafka-config gives
    (a properties file: secrets stay off the command line). Against the test broker the
    settings are plain ones; librdkafka takes the file's settings into every client the
    source makes, and what it refuses is said naming the file, not as a traceback."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:3000]
    source = broker.create_topic(TOPIC, 2)
    produce_lines(broker.producer(), TOPIC, lines, 2)
    config = tmp_path / "kafka.properties"
    config.write_text("# settings\nclient.id = boundless-trainer\nfetch.wait.max.ms=20\nsecurity.protocol=plaintext\n")
    _, got = train("--source", source, "--ps", "local", "--kafka-config", str(config), "--metrics-out", str(tmp_path / "a.json"))
    assert got["samples"] == len(lines)
    cmd = [sys.executable, "-m", "boundless", "train", "--no-follow", "--metrics-port", "-1", "--format", "libsvm"]
    cmd += ["--ps", "local"]
    config.write_text("client.id=boundless-trainer\nfetch.wait.max.ms=soon\n")  # a value librdkafka refuses
    proc = subprocess.run([*cmd, "--source", source, "--kafka-config", str(config)], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"--kafka-config {config}: " in proc.stderr and "fetch.wait.max.ms" in proc.stderr, proc.stderr[-2000:]
    config.write_text("group.id=mine\n")  # the source's own: refused before anything starts
    proc = subprocess.run([*cmd, "--source", source, "--kafka-config", str(config)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and f"{config}:1: group.id is the trainer's to set" in proc.stderr, proc.stderr[-2000:]
    proc = subprocess.run([*cmd, "--source", "-", "--kafka-config", str(config)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "only a kafka:// --source takes it" in proc.stderr


def test_a_topic_of_json_records_trains_as_the_file_of_them(broker, data_dir, tmp_path):
    """JSON is what most topics carry: one object a message, its label a key, told from the
    first messages as a file's first lines tell it."""
    rows = (data_dir / "avazu_10k/train_rows1-9999.csv").read_text().splitlines()
    names = rows[0].split(",")
    lines = [json.dumps(dict(zip(names, r.split(","), strict=True))) for r in rows[1:4001]]
    source = broker.create_topic("records", 1)
    produce_lines(broker.producer(), "records", lines, 1)
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "boundless", "train", "--no-follow", "--metrics-port", "-1", "--ps", "local"]
    outs = []
    for src, name in ((source, "topic"), (str(tmp_path / "records.jsonl"), "file")):
        proc = subprocess.run(
            [*cmd, "--source", src, "--metrics-out", str(tmp_path / f"{name}.json")], capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs.append(json.loads((tmp_path / f"{name}.json").read_text()))
    assert outs[0]["samples"] == outs[1]["samples"] == len(lines)
    assert outs[0]["window_auc"] == outs[1]["window_auc"] and outs[0]["sparse_rows"] == outs[1]["sparse_rows"]


def test_two_workers_split_the_partitions(broker, data_dir, tmp_path):
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()[:20000]
    source = broker.create_topic(TOPIC, 4)
    produce_lines(broker.producer(), TOPIC, lines, 4)
    _, got = train("--source", source, "--workers", "2", "--local-shards", "2", "--metrics-out", str(tmp_path / "w.json"))
    assert got["samples"] == len(lines) and got["workers"] == 2 and got["window_auc"] > 0.8, got


def test_a_missing_topic_or_a_bad_url_is_a_clear_error(broker, tmp_path):
    cmd = [sys.executable, "-m", "boundless", "train", "--no-follow", "--metrics-port", "-1", "--format", "libsvm"]
    proc = subprocess.run([*cmd, "--source", "kafka://nohost"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "expected kafka://HOST:PORT/TOPIC" in proc.stderr
    proc = subprocess.run([*cmd, "--source", f"kafka://{broker.bootstrap}/absent"], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "topic 'absent' cannot be read" in proc.stderr
    # no broker at the address: named, not a KafkaException traceback
    from trainer.input.kafka_source import KafkaSource

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    with pytest.raises(ValueError, match=f"no broker at {dead} answered within 1 s"):
        KafkaSource(f"kafka://{dead}/clicks", follow=False, metadata_timeout_s=1.0)


def test_the_backlog_of_a_topic_is_the_messages_past_the_position(broker, tmp_path):
    """The trainer's lag on a topic: messages of its partitions past the trained offsets."""
    from trainer.input.kafka_source import KafkaSource
    from trainer.input.source import Position

    source = broker.create_topic(TOPIC, 2)
    produce_lines(broker.producer(), TOPIC, [f"1 {i}:1" for i in range(300)], 2)
    for part, partitions in (((0, 1), (0, 1)), ((1, 2), (1,))):  # every partition, then worker 1 of 2's
        src = KafkaSource(source, follow=False, part=part)
        read, blocks = 0, src.blocks(1 << 20)
        while read < 150 * len(partitions):  # the fetches see the watermarks; the consumer stays open
            block = next(blocks)
            read += block.newline_count() if block is not None else 0
        assert src.backlog(Position(partitions={"0": 150, "1": 150})) == ("messages", 0)
        behind = {"0": 100, "1": 20}
        assert src.backlog(Position(partitions=behind)) == ("messages", sum(150 - behind[str(p)] for p in partitions))


def test_the_backlog_asked_while_the_reading_thread_consumes_stalls_neither(broker, tmp_path):
    """The progress line asks the backlog from the training thread while the reader thread
    consumes. librdkafka's watermark calls hold the GIL: made there, they stalled both
    threads (seconds a progress line on a followed topic, or for good)."""
    import threading

    from trainer.input.kafka_source import KafkaSource
    from trainer.input.source import Position

    source = broker.create_topic(TOPIC, 2)
    produce_lines(broker.producer(), TOPIC, [f"1 {i}:1" for i in range(2000)], 2)
    src = KafkaSource(source, follow=True)
    read = [0]

    def consume() -> None:
        for block in src.blocks(1 << 20):
            read[0] += block.newline_count() if block is not None else 0

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    answers: list[tuple[str, int] | None] = []

    def ask() -> None:
        while read[0] < 2000 or len(answers) < 20:
            answers.append(src.backlog(Position(partitions={"0": 0, "1": 0})))
            time.sleep(0.02)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    asking.join(timeout=60)
    src.stop = lambda: True
    assert not asking.is_alive(), f"backlog calls stalled: {len(answers)} answered, {read[0]} of 2000 messages read"
    assert answers[-1] == ("messages", 2000)  # every message is past offset 0
    reader.join(timeout=30)


def test_two_ranks_split_the_partitions_and_train_each_message_once_across_a_restart(broker, data_dir, tmp_path):
    """Two rank processes on a 4-partition topic and 2 shard processes: rank r reads the
    partitions p with p mod 2 == r; rank 1 killed after a cut ends rank 0 too (exit 75), and
    both started again train only what the cut does not hold: each message once in all."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines() * 4
    source = broker.create_topic(TOPIC, 4)
    produce_lines(broker.producer(), TOPIC, lines, 4)
    shards = [
        start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(tmp_path / f"ps{i}")], tmp_path)
        for i in range(2)
    ]

    def ranks(tag: str) -> list[subprocess.Popen[str]]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            master = f"127.0.0.1:{s.getsockname()[1]}"
        procs = []
        for rank in range(2):
            cmd = [sys.executable, "-m", "boundless", "train", "--no-follow", "--metrics-port", "-1", "--format", "libsvm"]
            cmd += ["--source", source, "--ps", ps, "--rank", str(rank), "--world-size", "2", "--master", master]
            cmd += ["--batch-size", "2048", "--checkpoint-interval-s", "0.3", "--metrics-out", str(tmp_path / "r.json")]
            log = open(tmp_path / f"{tag}{rank}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True))
        return procs

    try:
        ps = ",".join(s.address for s in shards if s.wait_ready())
        first = ranks("a")
        wait_for_text(tmp_path / "a0.log", "committed", first[0], timeout=120)
        first[1].kill()
        assert first[0].wait(120) == EXIT_RESTART
        first[1].wait(30)
        again = ranks("b")
        assert [p.wait(300) for p in again] == [0, 0], (tmp_path / "b0.log").read_text()[-2000:]
        assert "the stream takes up at part 0 at" in (tmp_path / "b0.log").read_text()
        result = json.loads((tmp_path / "r.json").read_text())
        assert result["samples"] == len(lines) and result["ranks"] == 2
        stats = [sys.executable, "-m", "boundless", "ps", "stats", ps, "--json"]
        tables = json.loads(subprocess.run(stats, capture_output=True, text=True, timeout=60, check=True).stdout)["tables"]
        assert {int(n) for t in tables.values() for n in t["samples"] if n} == {len(lines)}
    finally:
        for s in shards:
            s.stop()


def test_a_topic_trained_by_two_ranks_goes_on_with_three_then_one_each_message_once(broker, data_dir, tmp_path):
    """A trainer scaled out or in between runs (the chart's trainer.replicas changed): the
    cut's per-rank positions are a topic's partition offsets, which map to any number of
    ranks (partition p's offset is the rank's that read it). Before, a group of another size
    was refused, and --from-start, the way out it named, trained the topic again."""
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    source = broker.create_topic(TOPIC, 4)
    shards = [
        start(f"ps{i}", ["ps", "--shard-index", str(i), "--shard-count", "2", "--data-dir", str(tmp_path / f"ps{i}")], tmp_path)
        for i in range(2)
    ]

    def ranks(world: int, tag: str) -> dict:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            master = f"127.0.0.1:{s.getsockname()[1]}"
        out = tmp_path / f"{tag}.json"
        procs = []
        for rank in range(world):
            cmd = [sys.executable, "-m", "boundless", "train", "--no-follow", "--metrics-port", "-1", "--format", "libsvm"]
            cmd += ["--source", source, "--ps", ps, "--batch-size", "2048", "--metrics-out", str(out)]
            if world > 1:
                cmd += ["--rank", str(rank), "--world-size", str(world), "--master", master]
            log = open(tmp_path / f"{tag}{rank}.log", "w")  # noqa: SIM115 - closed with the process
            procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, text=True))
        codes = [p.wait(300) for p in procs]
        assert codes == [0] * world, (tmp_path / f"{tag}0.log").read_text()[-3000:]
        return json.loads(out.read_text())

    def tables_samples() -> set[int]:
        stats = [sys.executable, "-m", "boundless", "ps", "stats", ps, "--json"]
        tables = json.loads(subprocess.run(stats, capture_output=True, text=True, timeout=60, check=True).stdout)["tables"]
        return {int(n) for t in tables.values() for n in t["samples"] if n}

    try:
        ps = ",".join(s.address for s in shards if s.wait_ready())
        sent = 0
        for world, count in ((2, 12000), (3, 9000), (1, 6000)):
            produce_lines(broker.producer(), TOPIC, lines[sent : sent + count], 4)
            sent += count
            got = ranks(world, f"w{world}")
            assert got["samples"] == sent, (world, got["samples"], sent)  # every message once, the earlier ranks' too
            assert tables_samples() == {sent}
        assert "rank(s), taken up by" not in (tmp_path / "w30.log").read_text()  # LR keeps no worker-side state
    finally:
        for s in shards:
            s.stop()


def test_a_csv_topic_takes_its_columns_from_a_header_message_or_csv_header(broker, data_dir, tmp_path):
    """A topic's partitions share one header: a producer's header message (as `demo --source
    kafka --data FILE.csv` sends the file's first line, to partition 0 only) names the
    columns for every partition and is not a sample; a topic of bare rows needs
    --csv-header, and says so without it."""
    lines = (data_dir / "avazu_10k/train_rows1-9999.csv").read_text().splitlines()
    with_header, bare = broker.create_topic("with-header", 2), broker.create_topic("bare", 2)
    produce_lines(broker.producer(), "with-header", lines[:3001], 2)
    produce_lines(broker.producer(), "bare", lines[1:3001], 2)
    out = tmp_path / "m.json"
    base = [sys.executable, "-m", "boundless", "train", "--no-follow", "--metrics-port", "-1", "--metrics-out", str(out)]
    for source, extra in ((with_header, []), (bare, ["--csv-header", lines[0]])):
        proc = subprocess.run([*base, "--source", source, *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(out.read_text())
        assert got["samples"] + got["held_out_samples"] == 3000 and got["bad_lines"] == 0, got
        assert got["model"]["fields"][:3] == ["hour", "C1", "banner_pos"]  # Avazu's columns by name, id skipped
    refused = subprocess.run([*base, "--source", bare, "--format", "avazu"], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--csv-header" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.parametrize("follow", [True, False], ids=["followed-idle-exit", "no-follow"])
def test_a_broker_outage_mid_stream_pauses_it_and_every_message_trains_once(data_dir, tmp_path, follow):
    """The broker (or the network to it) goes down while the trainer is in the middle of a
    topic, for longer than --idle-exit-s: the stream waits (said, counted) and goes on when
    the broker answers again, every message trained once (a followed topic's produced after
    the outage too). Before, a followed topic's trainer with --idle-exit-s took the outage for a
    drained topic and ended "done" with most of the topic unread (exit 0), and one reading
    the topic to its end (--no-follow) ended with a KafkaException traceback."""
    from bench.slow_proxy import SlowProxy
    from boundless.kafka_broker import free_port

    port = free_port()
    proxy = SlowProxy(f"127.0.0.1:{port}", 0.005)  # fetches of 35 MB take seconds: the outage finds it mid-topic
    lines = (data_dir / "frappe/frappe.validation.libfm").read_text().splitlines()
    first, later = lines * 6, lines[:5000] if follow else []  # read once: the end is where the topic stood
    log, out = tmp_path / "train.log", tmp_path / "m.json"
    try:
        with KafkaBroker(tmp_path / "broker.log", port=port, front=proxy.address) as broker:
            source = broker.create_topic(TOPIC, 2)
            producer = broker.producer()
            produce_lines(producer, TOPIC, first, 2)
            cmd = [sys.executable, "-m", "boundless", "train", "--source", source, "--ps", "local", "--format", "libsvm"]
            cmd += ["--metrics-port", "-1", "--metrics-out", str(out), "--holdout-samples", "0", "--progress-interval-s", "0.5"]
            cmd += ["--model", "ffm", "--k", "4", *(["--idle-exit-s", "3"] if follow else ["--no-follow"])]
            with open(log, "w") as err:
                proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True)
            try:
                wait_for_text(log, "INFO samples ", proc, timeout=120)
                proxy.set_down(True)
                time.sleep(10.0)  # three times --idle-exit-s
                assert proc.poll() is None, log.read_text()[-3000:]
                proxy.set_down(False)
                if later:
                    produce_lines(producer, TOPIC, later, 2)
                proc.wait(timeout=180)
            finally:
                proc.kill()
                del producer  # before the proxy closes: its reconnects would be logged
    finally:
        proxy.close()
    text = log.read_text()
    assert proc.returncode == 0 and "Traceback" not in text, text[-3000:]
    assert "the broker does not answer" in text and "the broker answers again" in text, text[-3000:]
    assert json.loads(out.read_text())["samples"] == len(first) + len(later), text[-3000:]
