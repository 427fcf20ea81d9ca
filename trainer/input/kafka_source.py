"""A Kafka topic as a sample source: `--source kafka://HOST:PORT/TOPIC`.

Each message holds one sample line. The consumer is assigned its partitions directly (no
consumer group: a group's first fetch can take many seconds, and the position is ours to
keep): worker i of W reads the partitions p with p % W == i. The position is the next
offset of every partition; checkpoints store it and a resume starts there. Without a
stored position every partition starts at its beginning.

The source hands over blocks of one partition's consecutive messages, so the reader's
line count within a block is the partition's offset: block `file` is `TOPIC[P]`, and a bad
line is reported as `TOPIC[P]:N`, message offset N - 1. A message holding several lines is
reported and skipped (it stands in as an empty line, so offsets stay aligned).

A stored position is checked against the topic as it is now (docs/design/topic-positions.md):
- the topic's id, kept in each cut, differs: the topic was deleted and created again, so no
  stored offset names one of its messages. Its partitions are read from their oldest
  messages, said and counted (`resets`); before, the trainer took the new topic's first
  messages as read, in silence;
- an offset below the partition's oldest retained message: retention removed messages
  before they were trained. They are lost, said and counted (`lost_messages`), and the
  partition goes on at its oldest;
- while reading, a fetch that does not continue where the last one ended is judged the
  same way (offset_verdict): librdkafka's start over after OFFSET_OUT_OF_RANGE, or
  retention's skip, or offsets that were never messages.

A broker that stops answering mid-stream pauses it (docs/design/kafka-outages.md): the
stream is not idle while its broker does not answer, and a topic read to its end waits for
the broker to say where the end is; said, counted, and given up only by a topic read once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlparse

from ctr.runtime.extras import require
from ctr.runtime.repeated_error import RepeatedError
from trainer import metrics
from trainer.input.kafka_config import read_kafka_config
from trainer.input.source import Block, Position

log = logging.getLogger("trainer")

SCHEME = "kafka://"
POLL_MESSAGES = 20000
WATERMARK_EVERY_S = 0.5  # how often the reading thread notes the watermarks backlog() reports
OFFSET_BEGINNING = -2  # librdkafka's: a partition's oldest retained message
# a fetch that skips this many offsets or fewer is a transaction's commit marker, never asked about
MARKER_GAP = 1
WATERMARK_TIMEOUT_S = 10.0
# a broker that does not answer (docs/design/kafka-outages.md): while the stream has no
# message, a followed topic asks this often whether the broker answers (a drained topic and
# an unreachable broker both give no message), each question waiting at most ASK_TIMEOUT_S
ASK_EVERY_S = 2.0
ASK_TIMEOUT_S = 1.0
GIVE_UP_S = 600.0  # a topic read to its end (--no-follow) gives up after its broker failed this long


def is_kafka(source: str) -> bool:
    return source.startswith(SCHEME)


def parse_url(source: str) -> tuple[str, str]:
    """(bootstrap servers, topic) of kafka://HOST:PORT[,HOST:PORT]/TOPIC."""
    url = urlparse(source)
    topic = url.path.strip("/")
    if url.scheme != "kafka" or not url.netloc or not topic or "/" in topic:
        raise ValueError(f"--source {source!r}: expected kafka://HOST:PORT/TOPIC")
    return url.netloc, topic


CONTINUES, AGAIN, REMOVED, SKIPPED = "continues", "again", "removed", "skipped"


def offset_verdict(expected: int, first: int, oldest: int) -> str:
    """What a partition's messages starting at `first`, where `expected` was next, say, with
    `oldest` its oldest retained offset: they continue; the partition is read again from an
    earlier offset (created again, or truncated: AGAIN); offsets up to `first` were removed
    by retention before they were read (REMOVED: lost); or some were skipped that were never
    messages (a compacted key, a transaction's marker: SKIPPED, nothing lost)."""
    if first == expected:
        return CONTINUES
    if first < expected:
        return AGAIN
    return REMOVED if oldest >= first else SKIPPED


def partition_label(topic: str, partition: int) -> str:
    return f"{topic}[{partition}]"


class KafkaSource:
    """The StreamSource interface (peek, blocks, idle_since, position_after) over a topic."""

    def __init__(
        self,
        source: str,
        follow: bool,
        stop: Callable[[], bool] = lambda: False,
        start: Position | None = None,
        part: tuple[int, int] = (0, 1),
        poll_s: float = 0.2,
        metadata_timeout_s: float = 30.0,
        config_file: str = "",
    ) -> None:
        self.source = source
        self.servers, self.topic = parse_url(source)
        self.config_file = config_file  # --kafka-config: the client's own settings (security, sizes)
        self.client_config = read_kafka_config(config_file) if config_file else {}
        self.follow = follow
        self.stop = stop
        self.poll_s = poll_s
        self.idle_since = time.monotonic()
        self.lost: list[str] = []  # files: a topic has none (its lost messages are lost_messages)
        self.lost_messages: dict[str, int] = {}  # "TOPIC[P] offsets A-B" -> messages retention removed untrained
        self.resets: list[str] = []  # "TOPIC[P] at N": partitions read again from their oldest message
        self._watermarks: dict[int, tuple[int, int]] = {}  # partition -> (low, high), as fetches last saw them
        self._watermarks_at = 0.0
        self._down = RepeatedError(log, level=logging.WARNING)  # the broker not answering
        self._next_ask = 0.0  # time.monotonic() of the next question to an idle followed topic's broker
        self._consumer = self._new_consumer()
        try:
            meta = self._consumer.list_topics(self.topic, timeout=metadata_timeout_s)
        except Exception as e:  # noqa: BLE001 - KafkaException: no broker answered (the module loads lazily)
            self._consumer.close()
            raise ValueError(
                f"--source {source}: no broker at {self.servers} answered within {metadata_timeout_s:g} s ({e}); is it"
                " running, and is the address one this machine reaches?"
            ) from None
        topic_meta = meta.topics.get(self.topic)
        if topic_meta is None or topic_meta.error is not None or not topic_meta.partitions:
            reason = topic_meta.error if topic_meta is not None else "no such topic"
            raise ValueError(f"--source {source}: topic {self.topic!r} cannot be read: {reason}")
        index, count = part
        self.all_partitions = sorted(topic_meta.partitions)
        self.partitions = [p for p in self.all_partitions if p % count == index]
        stored = (start.partitions if start is not None else None) or {}
        # the next offset to read per partition; -2 is librdkafka's OFFSET_BEGINNING
        self.next: dict[int, int] = {p: int(stored.get(str(p), -2)) for p in self.partitions}
        self._trained: dict[int, int] = {p: o for p, o in self.next.items() if o >= 0}
        if not self.partitions:
            log.warning("%s: worker %d of %d has no partition to read (the topic has fewer)", source, index, count)
        self.topic_id = self._topic_id()
        was = start.topic_id if start is not None else ""
        if was and self.topic_id and was != self.topic_id:
            self._start_over(f"was deleted and created again since the checkpoint (topic id {was} then, {self.topic_id} now)")
        else:
            self._check_stored()

    def _topic_id(self) -> str:
        """The topic's id ("" where the broker gives none: before Kafka 2.8)."""
        from confluent_kafka import TopicCollection
        from confluent_kafka.admin import AdminClient

        admin = self._client(AdminClient, {})
        try:
            described = admin.describe_topics(TopicCollection([self.topic]), request_timeout=WATERMARK_TIMEOUT_S)
            return str(described[self.topic].result(timeout=WATERMARK_TIMEOUT_S).topic_id or "")
        except Exception as e:  # noqa: BLE001 - KafkaException, or no DescribeTopics: the offsets alone tell
            log.debug("%s: no topic id (%s)", self.source, e)
            return ""

    def _start_over(self, why: str) -> None:
        """The topic was created again: no stored offset names its messages, so every
        partition of this rank that had one is read from its oldest message."""
        stood = {p: o for p, o in self.next.items() if o >= 0}
        if not stood:
            return
        log.warning(
            "topic %s %s: the offsets the stream stood at (%s) name none of its messages, so its partitions are read from"
            " their oldest messages",
            self.topic,
            why,
            ", ".join(f"{partition_label(self.topic, p)} {o}" for p, o in sorted(stood.items())),
        )
        for p, o in stood.items():
            self.resets.append(f"{partition_label(self.topic, p)} at {o}")
            self.next[p] = OFFSET_BEGINNING
            self._trained.pop(p, None)
        metrics.SOURCE_PARTITIONS_RESET.inc(len(stood))

    def _check_stored(self) -> None:
        """Each stored offset against its partition's oldest retained one, before the first
        fetch. (One past the newest is the broker's to answer, OFFSET_OUT_OF_RANGE, on which
        librdkafka starts over: `_check_continues` says so. The newest offset as ListOffsets
        gives it is not asked: the test broker, Tansu, answers it wrongly.)"""
        from confluent_kafka import TopicPartition

        for p, nxt in self.next.items():
            if nxt < 0:
                continue
            try:
                low, _ = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=WATERMARK_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - KafkaException: the position stays as stored
                log.warning("%s: the offsets partition %d holds are unknown (%s); it takes up at %d", self.source, p, e, nxt)
                continue
            if nxt < low:  # retention ran ahead of the stored offset
                self._removed(p, nxt, low)
                self.next[p] = self._trained[p] = low

    def _removed(self, p: int, nxt: int, oldest: int) -> None:
        """Offsets nxt..oldest-1 of partition p were removed before they were read."""
        label = partition_label(self.topic, p)
        self.lost_messages[f"{label} offsets {nxt}-{oldest - 1}"] = oldest - nxt
        metrics.SOURCE_MESSAGES_LOST.inc(oldest - nxt)
        log.error(
            "%s: the stream stands at offset %d, and the partition's oldest retained message is %d: %d messages were removed"
            " (retention) before they were trained, and are lost. Training goes on at %d (a retention shorter than the"
            " trainer's lag, or than its downtime, loses samples)",
            label,
            nxt,
            oldest,
            oldest - nxt,
            oldest,
        )

    def _reset(self, p: int, nxt: int, how: str) -> None:
        """Partition p was read again from an offset before nxt: librdkafka's start over, when
        the broker answered that nxt is out of the partition's range."""
        label = partition_label(self.topic, p)
        self.resets.append(f"{label} at {nxt}")
        metrics.SOURCE_PARTITIONS_RESET.inc()
        log.warning(
            "%s: the stream stood at offset %d, and the partition %s: it holds no such offset any more (the topic was"
            " created again, or the partition truncated). Its messages are read from there",
            label,
            nxt,
            how,
        )

    def _new_consumer(self) -> Any:
        kafka = require("confluent_kafka")  # loads only for Kafka sources

        return self._client(
            kafka.Consumer,
            {
                "group.id": "boundless-trainer",  # required by the client; offsets are never committed
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            },
        )

    def _client(self, kind: Any, own: dict[str, Any]) -> Any:
        """A librdkafka client of `kind` with the source's settings, --kafka-config's, and
        `own` (which the file cannot set: trainer.input.kafka_config.OWNED)."""
        config: dict[str, Any] = {
            "bootstrap.servers": self.servers,
            "log.connection.close": False,
            "logger": log,  # librdkafka's complaints through logging, not raw lines on stderr
            **self.client_config,
            **own,
        }
        try:
            return kind(config)
        except Exception as e:  # noqa: BLE001 - KafkaException: a setting librdkafka does not take
            where = f"--kafka-config {self.config_file}" if self.config_file else f"--source {self.source}"
            said = e.args[0].str() if e.args and hasattr(e.args[0], "str") else str(e)  # a KafkaError's own words
            raise ValueError(f"{where}: {said}") from None

    def _assign(self, consumer: Any) -> None:
        from confluent_kafka import TopicPartition

        consumer.assign([TopicPartition(self.topic, p, o) for p, o in self.next.items()])

    def peek(self, max_lines: int = 2000, max_bytes: int = 4 << 20, timeout_s: float = 0.0) -> list[str]:
        """The first messages of every partition of the topic (every rank's: the lead
        resolves the schema for all), from the oldest each holds, by a throwaway consumer:
        an equal share of max_lines from each, partition 0's first. A producer's header
        message is at a partition's start, not at a checkpoint's position."""
        from confluent_kafka import TopicPartition

        consumer = self._new_consumer()
        share = max(1, max_lines // len(self.all_partitions))
        consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in self.all_partitions])
        got: dict[int, list[str]] = {p: [] for p in self.all_partitions}
        size = 0
        deadline = time.monotonic() + timeout_s
        try:
            while size < max_bytes and not self.stop() and any(len(v) < share for v in got.values()):
                msgs = consumer.consume(num_messages=share, timeout=0.2)
                for m in msgs:
                    lines = got.get(m.partition())
                    if m.error() is None and m.value() is not None and lines is not None and len(lines) < share:
                        lines.append(m.value().decode("utf-8", errors="replace").rstrip("\r\n"))
                        size += len(m.value())
                        if len(lines) == share:  # its share is in: the others' messages come next
                            consumer.pause([TopicPartition(self.topic, m.partition())])
                if not msgs and (any(got.values()) or time.monotonic() >= deadline):
                    break
        finally:
            consumer.close()
        return [line for p in self.all_partitions for line in got[p]]

    def _at_end(self) -> bool:
        """Every partition has been read up to its current high watermark. While the broker
        does not answer, False (_unanswered): the end of a topic is the broker's to say."""
        from confluent_kafka import TopicPartition

        timeout = WATERMARK_TIMEOUT_S
        if self._down.failing:  # asked again every ASK_EVERY_S, not at every empty fetch
            now = time.monotonic()
            if now < self._next_ask:
                return False
            self._next_ask, timeout = now + ASK_EVERY_S, ASK_TIMEOUT_S
        try:
            for p, nxt in self.next.items():
                low, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=timeout)
                if high > max(nxt, low):
                    self._answered()
                    return False
        except Exception as e:  # noqa: BLE001 - KafkaException: the broker did not answer
            self._unanswered(e)
            return False
        self._answered()
        return True

    def _ask(self) -> None:
        """Whether an idle followed topic's broker answers (a drained topic and a broker
        that is down both give no message): asked at most every ASK_EVERY_S while fetches
        come back empty, so an outage is known before any --idle-exit-s passes."""
        from confluent_kafka import TopicPartition

        now = time.monotonic()
        if now < self._next_ask or not self.partitions:
            return
        self._next_ask = now + ASK_EVERY_S
        try:
            self._consumer.get_watermark_offsets(TopicPartition(self.topic, self.partitions[0]), timeout=ASK_TIMEOUT_S)
        except Exception as e:  # noqa: BLE001 - KafkaException: the broker did not answer
            self._unanswered(e)
            return
        self._answered()

    def _unanswered(self, e: Exception) -> None:
        """The broker did not answer: counted, said (again once a minute while it lasts), and
        not idleness until the next question (--idle-exit-s waits for the broker). A topic
        read once gives up after GIVE_UP_S, naming the error."""
        metrics.SOURCE_KAFKA_FAILURES.inc()
        lasted = self._down.failed(f"{self.source}: the broker does not answer ({e}); the stream waits and asks again")
        if not self.follow and lasted >= GIVE_UP_S:
            raise ValueError(f"--source {self.source}: the broker has not answered for {lasted:.0f} s: {e}")
        self.idle_since = max(self.idle_since, time.monotonic() + ASK_EVERY_S + ASK_TIMEOUT_S)

    def _answered(self) -> None:
        self._down.passed(f"{self.source}: the broker answers again")

    def _note_watermarks(self) -> None:
        """Keeps the watermarks this consumer's fetches last saw, for backlog(). Called on the
        reading thread, between its consume() calls: librdkafka's watermark calls hold the
        GIL (confluent-kafka-python#412), and one made from the training thread while this
        one consumed stalled both, for seconds or for good."""
        from confluent_kafka import TopicPartition

        now = time.monotonic()
        if len(self._watermarks) == len(self.partitions) and now - self._watermarks_at < WATERMARK_EVERY_S:
            return
        self._watermarks_at = now
        for p in self.partitions:
            low, high = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), cached=True)
            if high >= 0:  # fetched from already (before that: -1001, not known)
                self._watermarks[p] = (low, high)

    def blocks(self, max_line_bytes: int) -> Iterator[Block | None]:
        self._assign(self._consumer)
        try:
            while not self.stop():
                msgs = self._consumer.consume(num_messages=POLL_MESSAGES, timeout=self.poll_s)
                self._note_watermarks()
                if not msgs:
                    if not self.follow and self._at_end():
                        return
                    if self.follow:
                        self._ask()
                    yield None
                    continue
                if self._down.failing and any(m.error() is None for m in msgs):
                    self._answered()
                self.idle_since = time.monotonic()
                yield from self._runs(msgs, max_line_bytes)
        finally:
            self._consumer.close()

    def _runs(self, msgs: list[Any], max_line_bytes: int) -> Iterator[Block]:
        """Blocks of consecutive offsets of one partition, in the order the messages came."""
        by_partition: dict[int, list[Any]] = {}
        for m in msgs:
            err = m.error()
            if err is not None:
                if err.fatal():
                    raise RuntimeError(f"--source {self.source}: {err}")
                log.warning("%s: %s", self.source, err)
                continue
            by_partition.setdefault(m.partition(), []).append(m)
        for p, part in by_partition.items():
            label = partition_label(self.topic, p)
            run: list[bytes] = []
            first = part[0].offset()
            self._check_continues(p, first)
            for m in part:
                off = m.offset()
                if run and off != first + len(run):  # a gap (compaction, transaction markers), or a reset
                    yield Block(label, first, first, b"".join(run), newlines=len(run))
                    self.next[p] = first + len(run)
                    self._check_continues(p, off)
                    run, first = [], off
                value = m.value() or b""
                line = value[:-1] if value.endswith(b"\n") else value
                if b"\n" in line or len(line) > max_line_bytes:
                    why = "holds several lines" if b"\n" in line else f"is longer than {max_line_bytes} bytes"
                    log.warning("%s:%d: the message %s; skipped", label, off + 1, why)
                    line = b""
                run.append(line + b"\n")
            yield Block(label, first, first, b"".join(run), newlines=len(run))
            self.next[p] = first + len(run)

    def _check_continues(self, p: int, first: int) -> None:
        """A fetch of partition p that does not start where the last one ended: read again
        from an earlier offset (librdkafka's start over, when the broker answered
        OFFSET_OUT_OF_RANGE: the topic created again while it was read), or offsets skipped,
        which are lost if retention removed them (the oldest retained offset tells)."""
        nxt = self.next[p]
        if nxt < 0 or first == nxt:
            return
        oldest = -1
        if first - nxt > MARKER_GAP:
            from confluent_kafka import TopicPartition

            try:
                oldest, _ = self._consumer.get_watermark_offsets(TopicPartition(self.topic, p), timeout=WATERMARK_TIMEOUT_S)
            except Exception:  # noqa: BLE001 - KafkaException: unknown, so not counted as lost
                return
        verdict = offset_verdict(nxt, first, oldest)
        if verdict == AGAIN:
            self._reset(p, nxt, f"was read again from offset {first}")
            self.topic_id = self._topic_id() or self.topic_id  # the cuts from here on name the topic as it is now
        elif verdict == REMOVED:
            self._removed(p, nxt, first)

    def backlog(self, position: Position) -> tuple[str, int] | None:
        """Messages of this worker's partitions past `position`, up to the high watermarks
        its fetches last saw (noted by the reading thread: no call into librdkafka here);
        None before any partition was fetched from."""
        watermarks = dict(self._watermarks)
        if not watermarks:
            return None
        at = position.partitions or {}
        return "messages", sum(max(0, high - max(low, int(at.get(str(p), -1)))) for p, (low, high) in watermarks.items())

    def position_after(self, position: Position) -> Position:
        """The stream position once the batch ending at `position` is trained: every
        partition's next offset, with the batch's own partition at its end."""
        done = dict(self._trained)
        if position.file.startswith(self.topic + "["):
            done[int(position.file[len(self.topic) + 1 : -1])] = position.line
        self._trained = done
        return Position(position.file, position.offset, position.line, {str(p): o for p, o in done.items()}, self.topic_id)
