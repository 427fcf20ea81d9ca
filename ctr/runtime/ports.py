"""Whether a port is free for this process alone.

gRPC on Linux binds with SO_REUSEPORT unless told otherwise, and then a second daemon of
the same user started on a port already served binds too: the kernel splits the
connections between the two, and a worker's pushes land in two stores, or a client's
requests are scored by two models. Daemons therefore bind without it (`serve --processes`
shares its port among its own processes only), and look before they do the slow part of
starting (a shard's store, a model's files): a bind without SO_REUSEPORT fails while any
socket listens on the port, whatever family or address it was bound with.
"""

from __future__ import annotations

import socket


def listener_on(host: str, port: int) -> str | None:
    """Why `port` on `host` cannot be bound (another socket listens there), or None if it
    can. Port 0 is always free."""
    if port == 0:
        return None
    try:
        addresses = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        return f"cannot resolve {host!r}: {e.strerror}"
    for family, kind, proto, _, address in addresses:
        with socket.socket(family, kind, proto) as probe:
            # a port whose last server stopped a moment ago (connections in TIME_WAIT) is free
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as e:
                return e.strerror or str(e)
    return None


def check_free(host: str, port: int, flag: str = "--port") -> None:
    """Raises OSError naming the flag when another process listens on the port."""
    why = listener_on(host, port)
    if why is not None:
        raise OSError(
            f"{flag} {port} on {host}: {why}; another process listens there (`ss -ltnp 'sport = :{port}'` shows which):"
            " stop it or choose another port"
        )
