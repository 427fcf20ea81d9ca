"""Where a partition's next messages start, against where the stream stood: the verdict
the Kafka source acts on (trainer.input.kafka_source.offset_verdict). The test broker
(Tansu) has no retention and no DeleteRecords, so retention's loss is decided here; a topic
created again is tested against the broker (tests/integration/test_kafka.py)."""

from __future__ import annotations

from trainer.input.kafka_source import AGAIN, CONTINUES, REMOVED, SKIPPED, offset_verdict
from trainer.input.source import Position
from trainer.run.recovery import decode_offsets, encode_offsets
from trainer.step.progressive import ProgressiveMetrics


def test_messages_that_start_where_the_stream_stood_continue_it():
    assert offset_verdict(1000, 1000, 0) == CONTINUES
    assert offset_verdict(1000, 1000, 1000) == CONTINUES


def test_messages_from_an_earlier_offset_are_the_partition_read_again():
    """librdkafka starts over at the oldest message when the broker says the stored offset
    is out of range: the topic was created again, or the partition truncated."""
    assert offset_verdict(1000, 0, 0) == AGAIN
    assert offset_verdict(1000, 999, 0) == AGAIN


def test_offsets_skipped_up_to_the_oldest_retained_were_removed_by_retention():
    assert offset_verdict(1000, 1500, 1500) == REMOVED
    assert offset_verdict(1000, 1500, 1600) == REMOVED  # retention moved on again since the fetch


def test_offsets_skipped_above_the_oldest_retained_were_never_messages():
    """A compacted key, a transaction's commit marker: nothing was lost."""
    assert offset_verdict(1000, 1002, 0) == SKIPPED
    assert offset_verdict(1000, 1500, 1499) == SKIPPED


def test_a_cut_keeps_the_topic_id_and_a_cut_from_before_it_reads_without_one():
    at = Position("clicks[1]", 0, 70, {"0": 50, "1": 70}, "AaJF0qfqfzCqhDIQgwKikA")
    point = decode_offsets(3, encode_offsets(at, 120, ProgressiveMetrics(100)))
    assert point.position == at
    old = b'{"position": {"file": "clicks[1]", "offset": 0, "line": 70, "partitions": {"0": 50, "1": 70}}, "samples": 120}'
    before = decode_offsets(3, old).position
    assert before is not None and before.topic_id == ""
