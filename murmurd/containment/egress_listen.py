"""The child's half of shell egress (run by `child.py` inside the new network namespace, before
Landlock, seccomp and `execve`; standard library only).

Upstream's design (manifest fact sheet, "Network ns + egress proxy"): the namespace holds only
`lo`, with the route `local default dev lo` so that *every* IPv4 destination is local. One TCP
listener per port the allowlist implies (at most 16) and one UDP socket on :53, all bound to
`0.0.0.0` inside the namespace, then catch whatever the command connects to on those ports; the
sockets are handed to murmurd over a unix socket (`SCM_RIGHTS`) and closed here, so the command
never holds them. A connection to any other port finds no listener: `ECONNREFUSED`. murmurd's
relay (`egress_relay.py`) reads each connection's original destination with `getsockname`.

The syscalls made here, in this order: `socket(AF_NETLINK, SOCK_RAW, NETLINK_ROUTE)`,
`bind`, `sendto`, `recv` (RTM_NEWROUTE and its ack); per port `socket(AF_INET, SOCK_STREAM)`,
`setsockopt(SO_REUSEADDR)`, `bind`, `listen`; `socket(AF_INET, SOCK_DGRAM)`, `bind` (:53);
`sendmsg` with `SCM_RIGHTS` on the inherited AF_UNIX socket; `close` of every one of them.
"""

from __future__ import annotations

import json
import os
import socket
import struct

MAX_PORTS = 16
DNS_PORT = 53
LISTEN_BACKLOG = 128
HANDOVER_TAG = b"murmurd-egress"

NETLINK_ROUTE = 0
RTM_NEWROUTE = 24
NLMSG_ERROR = 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_EXCL, NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
RT_TABLE_LOCAL = 255
RTPROT_BOOT = 3
RT_SCOPE_HOST = 254
RTN_LOCAL = 2
RTA_OIF = 4


class EgressSetupError(Exception):
    """The namespace could not be made to catch the allowlisted ports."""


def add_local_default_route() -> None:
    """`ip route add local default dev lo` (table local), through rtnetlink."""
    index = socket.if_nametoindex("lo")
    attribute = struct.pack("=HHi", 8, RTA_OIF, index)
    route = struct.pack("=BBBBBBBBI", socket.AF_INET, 0, 0, 0, RT_TABLE_LOCAL, RTPROT_BOOT, RT_SCOPE_HOST,
                        RTN_LOCAL, 0)
    body = route + attribute
    header = struct.pack("=LHHLL", 16 + len(body), RTM_NEWROUTE,
                         NLM_F_REQUEST | NLM_F_ACK | NLM_F_EXCL | NLM_F_CREATE, 1, 0)
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE) as link:
            link.bind((0, 0))
            link.sendto(header + body, (0, 0))
            answer = link.recv(4096)
    except OSError as exc:
        raise EgressSetupError(f"adding the route 'local default dev lo': {exc.strerror or exc}") from None
    _length, kind = struct.unpack_from("=LH", answer)
    if kind == NLMSG_ERROR:
        (error,) = struct.unpack_from("=i", answer, 16)
        if error != 0:
            raise EgressSetupError(f"adding the route 'local default dev lo': {os.strerror(-error)}")


def open_listeners(tcp_ports: list[int]) -> list[tuple[str, socket.socket]]:
    """A TCP listener per port and the UDP :53 socket, each labelled `tcp:<port>` / `udp:53`."""
    if len(tcp_ports) > MAX_PORTS:
        raise EgressSetupError(f"{len(tcp_ports)} ports to catch; at most {MAX_PORTS}")
    opened: list[tuple[str, socket.socket]] = []
    try:
        for port in tcp_ports:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            opened.append((f"tcp:{port}", listener))
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("0.0.0.0", int(port)))
            listener.listen(LISTEN_BACKLOG)
        dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        opened.append((f"udp:{DNS_PORT}", dns))
        dns.bind(("0.0.0.0", DNS_PORT))
    except OSError as exc:
        for _label, sock in opened:
            sock.close()
        raise EgressSetupError(f"listening in the network namespace: {exc.strerror or exc}") from None
    return opened


def hand_over(channel_fd: int, tcp_ports: list[int]) -> None:
    """Everything above, then the sockets to murmurd over `channel_fd`; nothing stays open here."""
    try:
        add_local_default_route()
        opened = open_listeners(tcp_ports)
        try:
            with socket.socket(fileno=channel_fd) as channel:
                labels = json.dumps([label for label, _sock in opened]).encode()
                socket.send_fds(channel, [HANDOVER_TAG + b" " + labels], [sock.fileno() for _l, sock in opened])
        except OSError as exc:
            raise EgressSetupError(f"handing the listeners to murmurd: {exc.strerror or exc}") from None
        finally:
            for _label, sock in opened:
                sock.close()
    finally:
        try:
            os.close(channel_fd)
        except OSError:
            pass  # closed with its socket object above


def probe() -> None:
    """What `hand_over` needs, tried in the probe's namespace (raises EgressSetupError)."""
    add_local_default_route()
    for _label, sock in open_listeners([80]):
        sock.close()
