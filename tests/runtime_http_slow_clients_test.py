"""The HTTP listener of a task under slow clients: a real `pstrain server` (a PS without a chief,
which waits serving its listener on --metrics_port) gets 200 connections that each send a part of
a request head (`GET /metrics HTTP/1.1\\r\\n`) and then nothing. While they are open, /healthz
answers within a second, again and again; no peer holds more connections than the per-peer cap
(the connections past it are closed with 503); the rest are answered 408 and closed once the
head timeout passes. Peers of other addresses (127.0.0.2, ...) fill the listener past its total
cap, and a new client is still served.

The limits are those docs/metrics.md states.
"""

import os
import selectors
import socket
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import Cluster, free_ports, wait_for  # noqa: E402

PER_PEER = 32  # connections one address may hold
TOTAL = 256  # connections of all peers together
HEAD_TIMEOUT_S = 5  # for a whole request head
SLOW_CLIENTS = 200
PARTIAL_HEAD = b"GET /metrics HTTP/1.1\r\n"


@pytest.fixture
def ps(tmp_path):
    """(the PS Process, its metrics port); the PS is killed when the test ends."""
    c = Cluster(tmp_path / "cluster", 1, 1)
    os.makedirs(c.log_dir)
    taken = {int(a.rsplit(":", 1)[1]) for tasks in c.spec.values() for a in tasks}
    port = next(p for p in iter(lambda: free_ports(1)[0], None) if p not in taken)
    argv = [c.binary, "server", "--connect_timeout", "120", "--log_level", "warn",
            "--metrics_port", str(port)]
    p = c.start_process("ps0", argv, c.env("ps", 0))
    try:
        wait_for(lambda: healthz(port, 5)[0] == 200, 30, "/healthz of the PS\n" + p.output())
        yield p, port
    finally:
        c.kill_all()


def healthz(port, timeout):
    """(status, seconds) of GET /healthz on a new connection; status 0 if none came in time."""
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            reply = b""
            while b"\r\n" not in reply:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError:
        return 0, time.monotonic() - start
    status = int(reply.split(b" ")[1]) if reply.startswith(b"HTTP/1.1 ") else 0
    return status, time.monotonic() - start


def open_slow(port, n, source="127.0.0.1"):
    """n connections from `source`, each having sent PARTIAL_HEAD."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        s.sendall(PARTIAL_HEAD)
        socks.append(s)
    return socks


class Ends:
    """What the server sent each connection before closing it, as connections close."""

    def __init__(self, socks):
        self.open = set(socks)
        self.replies = {s: b"" for s in socks}
        self.closed_at = {}
        self.sel = selectors.DefaultSelector()
        for s in socks:
            s.setblocking(False)
            self.sel.register(s, selectors.EVENT_READ)

    def poll(self, timeout=0):
        for key, _ in self.sel.select(timeout):
            s = key.fileobj
            try:
                chunk = s.recv(4096)
            except ConnectionResetError:
                chunk = b""
            if chunk:
                self.replies[s] += chunk
                continue
            self.sel.unregister(s)
            self.open.discard(s)
            self.closed_at[s] = time.monotonic()

    def statuses(self):
        return sorted({r.split(b"\r\n")[0].decode() for s, r in self.replies.items()
                       if s in self.closed_at})

    def close(self):
        self.sel.close()
        for s in self.replies:
            s.close()


def test_slow_clients_neither_stall_healthz_nor_hold_more_than_the_caps(ps):
    p, port = ps
    opened = time.monotonic()
    ends = Ends(open_slow(port, SLOW_CLIENTS))
    try:
        # While the slow connections are open (for their head timeout), /healthz answers at
        # once, every time.
        for _ in range(3):
            status, seconds = healthz(port, 2)
            assert status == 200 and seconds < 1, (status, seconds, p.output())
            ends.poll(0.2)
        # The listener keeps at most PER_PEER connections of 127.0.0.1 (the health checks
        # included): each past the cap took the slot of the idlest, which got 503.
        refused = [r for r in ends.replies.values() if r.startswith(b"HTTP/1.1 503 ")]
        assert SLOW_CLIENTS - PER_PEER <= len(refused) <= SLOW_CLIENTS - PER_PEER + 3, (
            len(refused), len(ends.closed_at))
        # The rest get 408 once their head timeout passes, and are closed.
        deadline = opened + HEAD_TIMEOUT_S + 3
        while ends.open and time.monotonic() < deadline:
            ends.poll(0.2)
        assert not ends.open, "%d connections still open %.1f s after they were opened" % (
            len(ends.open), time.monotonic() - opened)
        assert ends.statuses() == ["HTTP/1.1 408 Request Timeout",
                                   "HTTP/1.1 503 Service Unavailable"], ends.statuses()
        assert p.popen.poll() is None, p.output()
        assert healthz(port, 2)[0] == 200
    finally:
        ends.close()


def test_peers_past_the_total_cap_leave_room_for_a_new_client(ps):
    p, port = ps
    # 10 addresses of the loopback net, PER_PEER slow connections each: past TOTAL.
    socks = []
    for i in range(2, 2 + (TOTAL // PER_PEER) + 2):
        socks += open_slow(port, PER_PEER, source="127.0.0.%d" % i)
    ends = Ends(socks)
    try:
        wait_for(lambda: ends.poll(0.1) or len(ends.closed_at) >= len(socks) - TOTAL, 5,
                 "the listener to close the connections past its total cap")
        status, seconds = healthz(port, 2)
        assert status == 200 and seconds < 1, (status, seconds, p.output())
        ends.poll(0.2)
        assert len(ends.open) <= TOTAL
        assert ends.statuses() == ["HTTP/1.1 503 Service Unavailable"], ends.statuses()
    finally:
        ends.close()
