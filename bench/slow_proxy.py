"""A TCP proxy on 127.0.0.1 that holds every chunk a server sends back for `delay_s` (a
slow replica, a slow link) and can go down (`set_down`: every connection it carries is cut
and each new one closed at once, as an outage or a network partition looks to a client),
without any fault switch in the product. Used by the sharded-serving tests and benchmark,
and the S3 source's outage tests."""

from __future__ import annotations

import contextlib
import socket
import threading
import time


class SlowProxy:
    def __init__(self, target: str, delay_s: float) -> None:
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.delay_s = delay_s  # read as each connection opens
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.down = False
        self._open: list[socket.socket] = []  # the connections carried, cut when it goes down
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.down:
                client.close()
                continue
            upstream = socket.create_connection(self.target)
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._open += [client, upstream]
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

    def set_down(self, down: bool) -> None:
        self.down = down
        if down:
            with self._lock:
                for s in self._open:
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                self._open.clear()

    def close(self) -> None:
        self._closed = True
        self.set_down(True)
        self.listener.close()
