"""Loopback TCP proxies for tests that break the network between two real parts: a browser and
the daemon (`CuttingProxy`, in browserkit), a replica and its database (`Partition`, in
replicakit)."""

from __future__ import annotations

import contextlib
import socket
import threading


class LoopbackProxy:
    """A proxy on a free loopback port to `target_port`: one thread per connection direction.
    Subclasses decide when a new connection goes through (`_admit`) and what passes (`_pump`)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _admit(self) -> bool:
        """Whether a new connection reaches the target (it may block first); False closes it."""
        return True

    def _pump(self, source: socket.socket, sink: socket.socket, from_target: bool) -> None:
        raise NotImplementedError

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._connect, args=(client,), daemon=True).start()

    def _connect(self, client: socket.socket) -> None:
        if not self._admit():
            client.close()
            return
        try:
            upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._open.update((client, upstream))
        threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _close(self, *sockets: socket.socket) -> None:
        with self._lock:
            for sock in sockets:
                self._open.discard(sock)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _close_all(self) -> None:
        with self._lock:
            doomed = list(self._open)
        self._close(*doomed)

    def close(self) -> None:
        self._listener.close()
        self._close_all()
