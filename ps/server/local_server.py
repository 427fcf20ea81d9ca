"""In-process shards served over gRPC on loopback, for worker processes of one trainer."""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from ctr.runtime import daemon
from ps.server.shard import Shard


@dataclass
class LocalServers:
    addresses: list[str]
    servers: list[grpc.Server]

    def stop(self) -> None:
        for server in self.servers:
            server.stop(grace=1).wait()


def serve_shards(shards: list[Shard], threads: int = 8) -> LocalServers:
    from protos import ps_pb2_grpc
    from ps.server.service import PSServicer

    servers, addresses = [], []
    for shard in shards:

        def register(server: grpc.Server, shard: Shard = shard) -> None:
            ps_pb2_grpc.add_ParameterServerServicer_to_server(PSServicer(shard), server)

        server, port, _ = daemon.grpc_server("127.0.0.1", 0, threads, register, [], daemon.PS_MAX_MESSAGE_BYTES)
        servers.append(server)
        addresses.append(f"127.0.0.1:{port}")
    return LocalServers(addresses, servers)
