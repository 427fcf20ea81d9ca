"""A daemon's port is its own: a second daemon started on a port another one serves is
refused with the flag named, instead of binding beside it with SO_REUSEPORT (gRPC's default
on Linux), where the kernel would split the clients between the two."""

from __future__ import annotations

import socket

import pytest

from ctr.runtime import daemon, ports
from ctr.runtime.server_config import ServerConfig


def _listening(host: str = "127.0.0.1", reuseport: bool = False) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, 0))
    s.listen()
    return s


@pytest.mark.parametrize("reuseport", [False, True])
@pytest.mark.parametrize("probe_host", ["127.0.0.1", "0.0.0.0", "localhost"])
def test_a_listened_port_is_taken_whatever_address_or_reuse_it_was_bound_with(reuseport, probe_host):
    with _listening(reuseport=reuseport) as s:
        port = s.getsockname()[1]
        assert ports.listener_on(probe_host, port) is not None
        with pytest.raises(OSError, match=rf"--rest-port {port} on {probe_host}: .*another process listens there"):
            ports.check_free(probe_host, port, "--rest-port")


def test_a_port_bound_but_not_listening_or_closed_is_free():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    assert ports.listener_on("127.0.0.1", port) is None
    assert ports.listener_on("127.0.0.1", 0) is None
    ports.check_free("127.0.0.1", 0)


def test_a_second_grpc_server_on_a_served_port_is_refused_naming_the_flag():
    first = daemon.serve(ServerConfig(), "test", lambda s: None, [], {})
    try:
        with pytest.raises(OSError, match=rf"--port {first.port} on 127.0.0.1: .*another process listens there"):
            daemon.serve(ServerConfig(port=first.port), "test", lambda s: None, [], {})
    finally:
        first.stop(grace_s=0)


def test_servers_of_one_group_share_a_port_and_keep_others_out():
    first = daemon.serve(ServerConfig(), "test", lambda s: None, [], {}, share_port=True)
    try:
        second = daemon.serve(ServerConfig(port=first.port), "test", lambda s: None, [], {}, share_port=True)
        assert second.port == first.port
        second.stop(grace_s=0)
        with pytest.raises(OSError, match="another process listens there"):
            daemon.serve(ServerConfig(port=first.port), "test", lambda s: None, [], {})
    finally:
        first.stop(grace_s=0)
