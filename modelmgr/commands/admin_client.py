"""`boundless model pin|unpin|rollback|gc|publish --manager HOST:PORT`: the commands sent to
the manager daemon's admin service, with this process's identity (BOUNDLESS_TLS_*,
BOUNDLESS_TOKEN). Protobuf stays here; callers get plain values."""

from __future__ import annotations

from dataclasses import dataclass

from ctr.runtime.security import open_channel
from protos import modelmgr_pb2, modelmgr_pb2_grpc

TIMEOUT_S = 30.0  # a publish judges every pending export on its holdout first


@dataclass(frozen=True)
class PolicyState:
    model: str
    policy: str
    reason: str
    target: int | None
    versions: list[int]
    replicas_notified: int


@dataclass(frozen=True)
class Published:
    versions: list[int]  # published by the call
    version: int | None  # what the named export became
    rejected: str  # why the named export was rejected ("" when it was not)


class AdminClient:
    def __init__(self, address: str, model: str = "", timeout: float = TIMEOUT_S) -> None:
        self.channel = open_channel(address)
        self.stub = modelmgr_pb2_grpc.ModelAdminStub(self.channel)
        self.model = model
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def _state(self, reply: modelmgr_pb2.PolicyState) -> PolicyState:
        target = reply.target if reply.HasField("target") else None
        return PolicyState(reply.model, reply.policy, reply.reason, target, list(reply.versions), reply.replicas_notified)

    def describe(self) -> PolicyState:
        return self._state(self.stub.Describe(modelmgr_pb2.DescribeRequest(model=self.model), timeout=self.timeout))

    def pin(self, version: int, reason: str = "") -> PolicyState:
        req = modelmgr_pb2.PinRequest(model=self.model, version=version, reason=reason)
        return self._state(self.stub.Pin(req, timeout=self.timeout))

    def unpin(self) -> PolicyState:
        return self._state(self.stub.Unpin(modelmgr_pb2.UnpinRequest(model=self.model), timeout=self.timeout))

    def rollback(self, version: int | None = None, reason: str = "") -> PolicyState:
        req = modelmgr_pb2.RollbackRequest(model=self.model, version=version, reason=reason)
        return self._state(self.stub.Rollback(req, timeout=self.timeout))

    def gc(self, keep_full: int, dry_run: bool = False) -> list[int]:
        req = modelmgr_pb2.GcRequest(model=self.model, keep_full=keep_full, dry_run=dry_run)
        return list(self.stub.Gc(req, timeout=self.timeout).removed)

    def publish(self, export_id: str = "") -> Published:
        reply = self.stub.Publish(modelmgr_pb2.PublishRequest(model=self.model, export_id=export_id), timeout=self.timeout)
        version = reply.version if reply.HasField("version") else None
        return Published(list(reply.published), version, reply.rejected)
