"""--kafka-config: a properties file of librdkafka settings for a topic source, checked
line by line (trainer.input.kafka_config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.input.kafka_config import KafkaConfigError, read_kafka_config


def _file(tmp_path: Path, text: str) -> str:
    path = tmp_path / "kafka.properties"
    path.write_text(text)
    return str(path)


def test_a_properties_file_gives_its_settings_as_kafkas_tools_read_them(tmp_path):
    text = """# a managed cluster
security.protocol=SASL_SSL
sasl.mechanisms = SCRAM-SHA-512
! another comment style
sasl.username: trainer
sasl.password=p=ss:word

ssl.ca.location=/etc/kafka/ca.pem
"""
    assert read_kafka_config(_file(tmp_path, text)) == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "trainer",
        "sasl.password": "p=ss:word",  # only the first separator separates
        "ssl.ca.location": "/etc/kafka/ca.pem",
    }


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("bootstrap.servers=a:9092", "bootstrap.servers is the trainer's to set: the brokers come from --source"),
        ("group.id=mine", "group.id is the trainer's to set"),
        ("auto.offset.reset=latest", "auto.offset.reset is the trainer's to set"),
        ("enable.auto.commit=true", "enable.auto.commit is the trainer's to set"),
        ('sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="u";', "sasl.username"),
        ("ssl.truststore.location=/t.jks", "ssl.ca.location"),
        ("just words", "expected key=value"),
        ("=value", "expected key=value"),
    ],
)
def test_a_line_the_source_cannot_take_is_refused_naming_file_and_line(tmp_path, line, said):
    path = _file(tmp_path, f"# header\nclient.id=trainer\n{line}\n")
    with pytest.raises(KafkaConfigError, match=f"^{path}:3: .*") as refused:
        read_kafka_config(path)
    assert said in str(refused.value)


def test_a_setting_given_twice_or_a_missing_file_is_refused(tmp_path):
    path = _file(tmp_path, "client.id=a\nclient.id=b\n")
    with pytest.raises(KafkaConfigError, match=f"^{path}:2: client.id is set twice"):
        read_kafka_config(path)
    with pytest.raises(KafkaConfigError, match="--kafka-config .*absent.properties: cannot be read"):
        read_kafka_config(str(tmp_path / "absent.properties"))
