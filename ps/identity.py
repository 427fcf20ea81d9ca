"""Which model a PS holds: its name, type and (for models whose tables are sized by the
field list: ffm, wdl, deepfm) a digest of its fields. A shard records the identity of the
first trainer that restores it, keeps it in its store, and refuses a trainer that declares
another model instead of emptying itself for it; `boundless train --replace-model` starts
over explicitly."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any


class ModelMismatch(ValueError):
    """A trainer declared a model other than the one this shard holds."""


@dataclass(frozen=True)
class ModelIdentity:
    name: str
    type: str
    fields_sha256: str = ""  # "" where the field list does not size the tables, or is not known yet
    fields: int = 0

    @classmethod
    def of(cls, name: str, type_: str, fields: tuple[str, ...] = (), sized_by_fields: bool = False) -> ModelIdentity:
        if not sized_by_fields or not fields:
            return cls(name, type_)
        digest = hashlib.sha256("\n".join(fields).encode()).hexdigest()
        return cls(name, type_, digest, len(fields))

    def describe(self) -> str:
        shape = f", {self.fields} fields {self.fields_sha256[:12]}" if self.fields_sha256 else ""
        return f"{self.name!r} ({self.type}{shape})"

    def conflict(self, other: ModelIdentity) -> bool:
        """Another model: another name or type, or another field list where both know it."""
        if (self.name, self.type) != (other.name, other.type):
            return True
        return bool(self.fields_sha256 and other.fields_sha256 and self.fields_sha256 != other.fields_sha256)

    def merged(self, other: ModelIdentity) -> ModelIdentity:
        """This identity, with other's field digest where this one has none yet."""
        return self if self.fields_sha256 or not other.fields_sha256 else other

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> ModelIdentity:
        d: dict[str, Any] = json.loads(raw)
        return cls(str(d["name"]), str(d["type"]), str(d.get("fields_sha256", "")), int(d.get("fields", 0)))


def mismatch(held: ModelIdentity, declared: ModelIdentity, shard: int) -> ModelMismatch:
    return ModelMismatch(
        f"PS shard {shard} holds model {held.describe()}; this trainer declares {declared.describe()}."
        " Give the new model PS shards of its own, or start the trainer with --replace-model to drop the model they hold"
    )
