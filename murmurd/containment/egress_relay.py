"""murmurd's half of shell egress: the relay that carries a shell command's allowlisted
connections out of its network namespace (the child's half is `egress_listen.py`).

Per command: a `socketpair` whose one end the helper inherits; the helper sends over it the
listening sockets it made inside the namespace (`SCM_RIGHTS`), then execs the command. The relay
then runs its own asyncio loop on a thread of its own (the caller is a worker thread blocked on
the command; no loop murmurd serves on is touched), for exactly as long as the command:

- **TCP.** Each accepted connection's original destination is its `getsockname` (the
  namespace routes every IPv4 address to `lo`). It is admitted when `(address, port)` is granted
  by an IP entry, by an allowlisted name as resolved once per grant (the launch-time set), or by
  a name the DNS stub answered with that address (`dns_stub.NameBindings`); then it is connected
  from the host to that same address and port and spliced byte for byte (no TLS termination,
  no proxy variables). Otherwise it is reset. At most `max_connections` are open at once; one more is reset.
- **DNS.** UDP :53 answers granted names, refuses the rest (`dns_stub`).
- **Refusals** go to `on_refused` (from the relay's thread), at most `MAX_REPORTED` per command.

`stop()` closes every listener and connection and joins the thread: nothing outlives the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from murmurd.containment import dns_stub
from murmurd.containment.egress_listen import HANDOVER_TAG, MAX_PORTS

MAX_CONNECTIONS = 64
MAX_DNS_IN_FLIGHT = 32
MAX_REPORTED = 100
CONNECT_TIMEOUT_SECONDS = 10.0
RESOLVE_TIMEOUT_SECONDS = 5.0
HANDOVER_TIMEOUT_SECONDS = 10.0
STOP_TIMEOUT_SECONDS = 10.0
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class EgressGrant:
    """What a shell command may reach: `(host, port)` pairs, a host being a lower-case name or an
    IP address (as `murmurd.host.egress` normalises both). Only IPv4 is carried (upstream)."""

    pairs: frozenset[tuple[str, int]]
    # The launch-time address set: resolved by the first command's relay, kept for the grant's life.
    launch: LaunchAddresses = field(default_factory=lambda: LaunchAddresses(), compare=False, repr=False)

    @property
    def ports(self) -> list[int]:
        return sorted({port for _host, port in self.pairs})

    @property
    def names(self) -> frozenset[str]:
        return frozenset(host for host, _port in self.pairs if not _is_address(host))

    def problem(self) -> str | None:
        """Why this grant cannot be carried to a shell child, or None."""
        if len(self.ports) > MAX_PORTS:
            return f"network.allow implies {len(self.ports)} ports; shell egress catches at most {MAX_PORTS}"
        return None

    def __bool__(self) -> bool:
        return bool(self.pairs)


@dataclass
class LaunchAddresses:
    """`(address, port)` pairs: IP entries as they are, each entry's name as resolved once."""

    pairs: frozenset[tuple[str, int]] | None = None


@dataclass(frozen=True)
class Refusal:
    """One refused connection or query: `kind` is `tcp` or `dns`, `target` `address:port` or a name."""

    kind: str
    target: str
    reason: str


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


class EgressRelay:
    """One command's relay (see the module docstring). Use: `child_spec()` and `child_fd` for the
    helper, `start()` once it has exec'd, `stop()` always."""

    def __init__(self, grant: EgressGrant, on_refused: Callable[[Refusal], None] | None = None,
                 max_connections: int = MAX_CONNECTIONS) -> None:
        self.grant = grant
        self.on_refused = on_refused
        self.max_connections = max_connections
        self._mine, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._mine.set_inheritable(False)
        self._sockets: list[tuple[str, socket.socket]] = []
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None
        self._ready = threading.Event()
        self._stop_requested = threading.Event()
        self._stop_lock = threading.Lock()
        self._launch_pairs: set[tuple[str, int]] = set()
        self._bindings = dns_stub.NameBindings()
        self._open = 0
        self._dns_in_flight = 0
        self._reported = 0
        self.accepted = 0  # connections admitted and spliced (for tests and logs)

    @property
    def child_fd(self) -> int:
        return self._theirs.fileno()

    def child_spec(self) -> dict:
        return {"channel_fd": self.child_fd, "tcp_ports": self.grant.ports}

    # ------------------------------------------------------------------ lifecycle (caller's thread)

    def start(self) -> None:
        """Take the listeners the helper sent (it sent them before exec) and serve them."""
        self._theirs.close()
        self._mine.settimeout(HANDOVER_TIMEOUT_SECONDS)
        try:
            message, fds, _flags, _addr = socket.recv_fds(self._mine, 4096, 2 * MAX_PORTS + 2)
        except (OSError, TimeoutError) as exc:
            raise OSError(f"the shell egress listeners did not arrive: {exc}") from None
        finally:
            self._mine.close()
        sockets = [socket.socket(fileno=fd) for fd in fds]
        labels = _labels(message, len(sockets))
        if labels is None:
            for sock in sockets:
                sock.close()
            raise OSError("the shell egress listeners arrived malformed")
        self._sockets = list(zip(labels, sockets))
        for _label, sock in self._sockets:
            sock.setblocking(False)
        self._thread = threading.Thread(target=self._run, name="murmurd-shell-egress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Close everything the relay holds and end its thread (idempotent; two threads may call
        it at once: each takes what is left to close, and only one joins the thread)."""
        self._stop_requested.set()
        with self._stop_lock:
            thread, self._thread = self._thread, None
            sockets, self._sockets = self._sockets, []
        for end in (self._mine, self._theirs):
            end.close()
        if thread is not None:
            self._ready.wait(STOP_TIMEOUT_SECONDS)
            loop, stopping = self._loop, self._stopping
            if loop is not None and stopping is not None:
                with contextlib.suppress(RuntimeError):  # the loop already ended
                    loop.call_soon_threadsafe(stopping.set)
            thread.join(STOP_TIMEOUT_SECONDS)
        for _label, sock in sockets:
            sock.close()

    # ------------------------------------------------------------------ the relay's own loop

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        finally:
            self._ready.set()

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopping = asyncio.Event()
        self._ready.set()
        if self._stop_requested.is_set():
            return
        servers: list[asyncio.AbstractServer] = []
        transports: list[asyncio.BaseTransport] = []
        try:
            for label, sock in self._sockets:  # DNS first: its answers do not wait for the launch set
                if not label.startswith("tcp:"):
                    transport, _protocol = await self._loop.create_datagram_endpoint(
                        lambda: _DnsProtocol(self), sock=sock)
                    transports.append(transport)
            await self._resolve_launch_addresses()  # connections wait in the backlog meanwhile
            for label, sock in self._sockets:
                if label.startswith("tcp:"):
                    servers.append(await asyncio.start_server(self._connection, sock=sock))
            if not self._stop_requested.is_set():
                await self._stopping.wait()
        finally:
            for server in servers:
                server.close()
            for transport in transports:
                transport.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _resolve_launch_addresses(self) -> None:
        """The launch-time address set: IP entries as they are, names resolved once (by the
        grant's first command) and kept."""
        known = self.grant.launch.pairs
        if known is not None:
            self._launch_pairs = set(known)
            return
        pairs = {(host, port) for host, port in self.grant.pairs if _is_address(host)}
        names = sorted(self.grant.names)
        found = await asyncio.gather(*(self.resolve(name) for name in names), return_exceptions=True)
        for name, addresses in zip(names, found):
            if isinstance(addresses, BaseException):
                continue
            pairs |= {(address, port) for address in addresses for host, port in self.grant.pairs if host == name}
        self._launch_pairs = pairs
        self.grant.launch.pairs = frozenset(pairs)

    async def resolve(self, name: str) -> list[str]:
        """`name`'s IPv4 addresses, resolved by the host (bounded in time)."""
        assert self._loop is not None
        try:
            infos = await asyncio.wait_for(
                self._loop.getaddrinfo(name, None, family=socket.AF_INET, type=socket.SOCK_STREAM),
                RESOLVE_TIMEOUT_SECONDS)
        except (OSError, asyncio.TimeoutError):
            return []
        return sorted({str(info[4][0]) for info in infos})

    def admits(self, address: str, port: int) -> bool:
        if (address, port) in self._launch_pairs:
            return True
        return any((name, port) in self.grant.pairs for name in self._bindings.names_of(address))

    def refuse(self, kind: str, target: str, reason: str) -> None:
        if self.on_refused is None or self._reported > MAX_REPORTED:
            return
        self._reported += 1
        if self._reported > MAX_REPORTED:
            reason += f"; {MAX_REPORTED} refusals reported, no further refusals of this command are"
        try:
            self.on_refused(Refusal(kind, target, reason))
        except Exception:  # noqa: BLE001 - a failing reporter must not stop the relay
            pass

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        address, port = writer.get_extra_info("sockname")[:2]
        target = f"{address}:{port}"
        if self._open >= self.max_connections:
            self.refuse("tcp", target, f"the command already has {self.max_connections} open connections")
            _reset(writer)
            return
        if not self.admits(address, port):
            self.refuse("tcp", target, "not in capabilities.network.allow (by address, or by a name the "
                                       "DNS stub answered)")
            _reset(writer)
            return
        self._open += 1
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                up_reader, upstream = await asyncio.wait_for(asyncio.open_connection(address, port),
                                                             CONNECT_TIMEOUT_SECONDS)
            except (OSError, asyncio.TimeoutError):
                _reset(writer)
                return
            self.accepted += 1
            await asyncio.gather(_pipe(reader, upstream), _pipe(up_reader, writer))
        except asyncio.CancelledError:
            pass  # the command ended: its connections end with it
        finally:
            self._open -= 1
            for end in (writer, upstream):
                if end is not None:
                    end.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Copy until end of file, then half-close: each direction ends on its own."""
    try:
        while data := await source.read(_CHUNK):
            sink.write(data)
            await sink.drain()
        if sink.can_write_eof():
            sink.write_eof()
    except OSError:
        sink.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with a reset (SO_LINGER 0): the client sees its connection refused, not a clean end."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _labels(message: bytes, count: int) -> list[str] | None:
    tag, _, body = message.partition(b" ")
    if tag != HANDOVER_TAG:
        return None
    try:
        labels = json.loads(body)
    except ValueError:
        return None
    if not isinstance(labels, list) or len(labels) != count or not all(isinstance(x, str) for x in labels):
        return None
    return labels


class _DnsProtocol(asyncio.DatagramProtocol):
    def __init__(self, relay: EgressRelay) -> None:
        self.relay = relay
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple) -> None:
        record = dns_stub.parse(data)
        if record is None or self.relay._dns_in_flight >= MAX_DNS_IN_FLIGHT:
            return
        self.relay._dns_in_flight += 1
        asyncio.get_running_loop().create_task(self._answer(record, addr))

    async def _answer(self, record: dns_stub.DNSRecord, addr: tuple) -> None:
        try:
            packet, refused = await dns_stub.answer(record, self.relay.grant.names, self.relay.resolve,
                                                    self.relay._bindings)
            if refused is not None:
                self.relay.refuse("dns", refused, "not in capabilities.network.allow: answered REFUSED")
            if self.transport is not None and not self.transport.is_closing():
                self.transport.sendto(packet, addr)
        except Exception:  # noqa: BLE001 - a query the stub cannot answer gets no answer, nothing more
            pass
        finally:
            self.relay._dns_in_flight -= 1
