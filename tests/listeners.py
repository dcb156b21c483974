"""Local TCP listeners on 127.0.0.1 for tests of what a command contacts: each accepted
connection is kept (to count it, or hold it open) and handed to `handle`."""

from __future__ import annotations

import socket
import threading
import time


class LocalListener:
    """Accepts on an unused 127.0.0.1 port in a daemon thread; the default `handle` holds the
    connection open and never answers (a server behind a stuck proxy)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections.append(conn)
            self.handle(conn)

    def handle(self, conn: socket.socket) -> None:
        """What to do with a new connection (default: nothing; it stays open)."""

    def seen(self, *, settle_s: float = 0.3) -> int:
        """Connections so far; the kernel queues a connect before accept() returns, so poll a little."""
        deadline = time.monotonic() + settle_s
        while not self.connections and time.monotonic() < deadline:
            time.sleep(0.02)
        return len(self.connections)

    def close(self) -> None:
        self.sock.close()
        for conn in self.connections:
            conn.close()
