"""The manager daemon's ModelAdmin gRPC service: protobuf stays here. Which role each call
needs is the daemon's policy (modelmgr.cli.ADMIN_ROLES); the work is modelmgr.manager's."""

from __future__ import annotations

from typing import NoReturn

import grpc

from ctr.format.modelfile import EXPORT_NAME
from ctr.repository.versions import Policy, Repository, RepositoryError
from modelmgr.commands import actions
from modelmgr.manager import Manager
from protos import modelmgr_pb2, modelmgr_pb2_grpc


def _abort(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> NoReturn:
    context.abort(code, message)
    raise AssertionError("unreachable")  # context.abort raises


class ModelAdminServicer(modelmgr_pb2_grpc.ModelAdminServicer):
    def __init__(self, manager: Manager) -> None:
        self.manager = manager
        self.repo = manager.repo

    def _check_model(self, model: str, context: grpc.ServicerContext) -> None:
        if model and model != self.repo.model:
            _abort(context, grpc.StatusCode.NOT_FOUND, f"model: {model!r} is not managed here (managing {self.repo.model!r})")

    def _state(self, policy: Policy, notified: int = 0) -> modelmgr_pb2.PolicyState:
        target = self.repo.target()
        return modelmgr_pb2.PolicyState(
            model=self.repo.model,
            policy=policy.describe(),
            reason=policy.reason,
            target=target,
            versions=self.repo.versions(),
            replicas_notified=notified,
        )

    def _change(self, context: grpc.ServicerContext, change: actions.PolicyChange) -> modelmgr_pb2.PolicyState:
        try:
            policy, notified = self.manager.set_policy(change)
        except RepositoryError as e:
            _abort(context, grpc.StatusCode.FAILED_PRECONDITION, str(e))
        except OSError as e:
            _abort(context, grpc.StatusCode.UNAVAILABLE, f"the repository cannot be written: {e}")
        return self._state(policy, notified)

    def _known(self, version: int, context: grpc.ServicerContext) -> int:
        if version not in self.repo.versions():
            _abort(context, grpc.StatusCode.NOT_FOUND, f"version: {version} is not a published version of {self.repo.model}")
        return version

    def Describe(self, request: modelmgr_pb2.DescribeRequest, context: grpc.ServicerContext) -> modelmgr_pb2.PolicyState:
        self._check_model(request.model, context)
        return self._state(self.repo.policy())

    def Pin(self, request: modelmgr_pb2.PinRequest, context: grpc.ServicerContext) -> modelmgr_pb2.PolicyState:
        self._check_model(request.model, context)
        version = self._known(request.version, context)
        return self._change(context, lambda repo: actions.pin(repo, version, request.reason))

    def Unpin(self, request: modelmgr_pb2.UnpinRequest, context: grpc.ServicerContext) -> modelmgr_pb2.PolicyState:
        self._check_model(request.model, context)
        return self._change(context, actions.unpin)

    def Rollback(self, request: modelmgr_pb2.RollbackRequest, context: grpc.ServicerContext) -> modelmgr_pb2.PolicyState:
        self._check_model(request.model, context)
        version = self._known(request.version, context) if request.HasField("version") else None
        return self._change(context, lambda repo: actions.rollback(repo, version, request.reason))

    def Gc(self, request: modelmgr_pb2.GcRequest, context: grpc.ServicerContext) -> modelmgr_pb2.GcReply:
        self._check_model(request.model, context)
        if request.keep_full < 1:
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"keep_full: {request.keep_full}, at least 1 full version stays")
        try:
            gone = self.manager.gc(request.keep_full, request.dry_run)
        except OSError as e:
            _abort(context, grpc.StatusCode.UNAVAILABLE, f"the repository cannot be written: {e}")
        return modelmgr_pb2.GcReply(removed=gone, dry_run=request.dry_run)

    def Publish(self, request: modelmgr_pb2.PublishRequest, context: grpc.ServicerContext) -> modelmgr_pb2.PublishReply:
        self._check_model(request.model, context)
        name = request.export_id
        if name and not EXPORT_NAME.fullmatch(name):
            _abort(context, grpc.StatusCode.INVALID_ARGUMENT, f"export_id: {name!r} is not an export folder name")
        if name and not (self.manager.publisher.exports / name / "READY").exists() and not _handled(self.repo, name):
            _abort(context, grpc.StatusCode.NOT_FOUND, f"export_id: no READY export {name!r} in the exports folder")
        published = self.manager.scan()
        reply = modelmgr_pb2.PublishReply(published=published)
        if name:
            version = self.repo.version_of_export(name)
            if version is not None:
                reply.version = version
            reply.rejected = next((str(r.get("reason")) for r in self.repo.rejected() if r.get("export_id") == name), "")
        return reply


def _handled(repo: Repository, export_id: str) -> bool:
    return export_id in repo.processed_exports()
