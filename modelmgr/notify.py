"""Tells serving replicas that the repository changed (a version published, the policy
set), so they look at once instead of at their next poll: the Predictor's Refresh RPC."""

from __future__ import annotations

import logging
from typing import Any

from modelmgr import metrics

log = logging.getLogger("modelmgr")
TIMEOUT_S = 1.0


class Notifier:
    def __init__(self, addresses: str, model: str) -> None:
        self.addresses = [a for a in addresses.split(",") if a]
        self.model = model
        self._stubs: dict[str, Any] = {}

    def notify(self) -> int:
        """Refresh on every replica; returns how many answered (a replica that does not is
        logged: it still polls)."""
        if not self.addresses:
            return 0
        import grpc

        from ctr.runtime.security import open_channel
        from protos import predict_pb2, predict_pb2_grpc

        answered = 0
        for address in self.addresses:
            stub = self._stubs.get(address)
            if stub is None:
                stub = self._stubs[address] = predict_pb2_grpc.PredictorStub(open_channel(address))
            try:
                stub.Refresh(predict_pb2.RefreshRequest(model=self.model), timeout=TIMEOUT_S)
                answered += 1
            except grpc.RpcError as e:
                metrics.NOTIFY_FAILURES.inc()
                log.warning("serving at %s did not take the refresh: %s", address, e.code().name)
        return answered
