"""A Kafka client's own settings for `--source kafka://...`: `--kafka-config FILE`, a
properties file as Kafka's tools take one (`key=value` a line, `#` or `!` comments), of
librdkafka's settings (security.protocol, sasl.*, ssl.*, client.id, fetch sizes). Secrets
(sasl.password, ssl.key.password) belong in such a file, mounted from a secret, never on a
command line that `ps` shows. The settings the source itself decides are refused, naming
file:line: the bootstrap servers come from the URL, and the consumer's group, offsets and
partition assignment are the trainer's (trainer.input.kafka_source)."""

from __future__ import annotations

from pathlib import Path

# the source's own: a file that set them would break the position it keeps
OWNED = {
    "bootstrap.servers": "the brokers come from --source kafka://HOST:PORT/TOPIC",
    "metadata.broker.list": "the brokers come from --source kafka://HOST:PORT/TOPIC",
    "group.id": "the trainer assigns partitions itself and keeps their offsets in its checkpoints",
    "enable.auto.commit": "the trainer keeps offsets in its checkpoints, never in the broker",
    "auto.offset.reset": "a partition with no stored offset is read from its oldest message",
    "enable.partition.eof": "the trainer tells a topic's end itself",
    "logger": "librdkafka's messages go to the trainer's log",
}
# Java clients' settings that librdkafka names otherwise: said with what to write instead
JAVA_ONLY = {
    "sasl.jaas.config": "librdkafka takes sasl.username and sasl.password (and sasl.mechanisms)",
    "sasl.mechanism": "librdkafka's name is sasl.mechanisms",
    "ssl.truststore.location": "librdkafka takes ssl.ca.location (a PEM file)",
    "ssl.keystore.location": "librdkafka takes ssl.certificate.location and ssl.key.location (PEM files)",
    "key.deserializer": "the trainer reads each message's value as one sample line",
    "value.deserializer": "the trainer reads each message's value as one sample line",
}


class KafkaConfigError(ValueError):
    """A line of --kafka-config the source cannot take, named by file:line."""


def read_kafka_config(path: str) -> dict[str, str]:
    """The settings of a properties file, checked line by line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise KafkaConfigError(f"--kafka-config {path}: cannot be read ({e})") from None
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", "!")):
            continue
        key, sep, value = _split(line)
        where = f"{path}:{number}"
        if not sep or not key:
            raise KafkaConfigError(f"{where}: expected key=value, got {line[:80]!r}")
        if key in OWNED:
            raise KafkaConfigError(f"{where}: {key} is the trainer's to set: {OWNED[key]}")
        if key in JAVA_ONLY:
            raise KafkaConfigError(f"{where}: {key} is a Java client's setting: {JAVA_ONLY[key]}")
        if key in out:
            raise KafkaConfigError(f"{where}: {key} is set twice")
        out[key] = value
    return out


def _split(line: str) -> tuple[str, str, str]:
    """key, separator, value of a properties line: the first '=' or ':' separates (as in
    Java's properties files), blanks around both are dropped."""
    cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
    if cut < 0:
        return line, "", ""
    return line[:cut].strip(), line[cut], line[cut + 1 :].strip()
