"""A TCP proxy on 127.0.0.1 that holds every chunk a server sends back for `delay_s`:
a slow replica, without any fault switch in the product. Used by the sharded-serving
tests and benchmark."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class SlowProxy:
    def __init__(self, target: str, delay_s: float) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.delay_s = delay_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=self._pipe, args=(client, upstream, 0.0), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, self.delay_s), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, delay_s: float) -> None:
        try:
            while chunk := src.recv(1 << 16):
                if delay_s:
                    time.sleep(delay_s)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self.listener.close()
