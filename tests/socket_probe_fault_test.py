"""Every socket a PS opens, probed from outside with bytes, as anyone who can reach a port may do.

A PS runs with `--transport ucx` and `--metrics_port` in the cluster of probe/cluster.py, whose
worker:1 also uses UCX. The probe finds every TCP port the PS process listens on (from
/proc/<pid>/net/tcp{,6}, matched against the socket inodes of /proc/<pid>/fd) and:

- sends 16 and 64 bytes of 0xff to each (UCX 1.13's TCP connection manager aborted the process
  on them, before any token could be checked: a UCX listener may not be exposed), and checks
  that the PS listens on its gRPC and metrics ports and on nothing else;
- sends 10,000 seeded connections' worth of bytes spread over those ports: random bytes, and
  mutations (truncations, bit flips, splices, ...) of valid traffic (an HTTP GET of /metrics, a
  gRPC Pull over HTTP/2). Every process must stay alive, the PS must answer a legitimate pull
  with the values it held before, and the job must end the legitimate way, worker:1 training
  over UCX. PSTRAIN_PROBE_SEED picks the bytes (printed on failure).
"""

import concurrent.futures
import os
import random
import socket
import struct
import tempfile
import time
import urllib.request

import pytest

from probe import wire
from probe.cluster import Cluster, free_ports, run_checks
from probe.wire import pb

SEED = int(os.environ.get("PSTRAIN_PROBE_SEED", "20240606"))
CONNECTIONS = 10000
PARALLEL = 8
READ_TIMEOUT = 5.0  # seconds a server may take to close a connection after its peer's EOF
BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
VARIABLES = {"dense0/kernel": ([784, 10], "glorot_uniform", {"seed": 7}),
             "dense0/bias": ([10], "zeros", {}),
             "probe/small": ([3, 2], "constant", {"value": 1.5})}


@pytest.fixture
def cluster():
    if not BINARY or not os.path.exists(BINARY):
        pytest.fail("PSTRAIN_BINARY=%r is not a built pstrain binary" % BINARY)
    with tempfile.TemporaryDirectory(prefix="pstrain-socket-probe-") as tmp:
        c = Cluster(tmp, BINARY, SOURCE_DIR)
        c.metrics_port = free_ports(1)[0]
        ucx = ["--transport", "ucx"]
        c.start({"ps:0": ucx + ["--metrics_port", str(c.metrics_port)], "worker:1": ucx})
        try:
            yield c
        finally:
            c.kill_all()


def ready(c):
    """Registers as worker 0, creates the variables and returns them as pulled."""
    c.register()
    c.wait_configured()
    for name, (shape, kind, init) in VARIABLES.items():
        c.create_variable(name, shape, kind, **init)
    return c.pull()


# --- the sockets of a process ----------------------------------------------------------------

def socket_inodes(pid):
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    return inodes


def _hex_address(text):
    """127.0.0.1-style text of /proc/net/tcp{,6}'s hex address (host byte order words)."""
    raw = bytes.fromhex(text)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    family = socket.AF_INET if len(raw) == 4 else socket.AF_INET6
    text = socket.inet_ntop(family, words)
    return text[len("::ffff:"):] if text.startswith("::ffff:") else text  # IPv4 on a v6 socket


def listening_sockets(pid):
    """[(protocol, address, port)] of every listening or bound socket the process holds: TCP
    in LISTEN, any UDP socket, and any listening Unix socket (tcp6 and udp6 are named tcp and
    udp)."""
    mine = socket_inodes(pid)
    found = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        with open("/proc/%d/net/%s" % (pid, proto)) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], int(fields[9])
                if inode not in mine or (proto.startswith("tcp") and state != "0A"):
                    continue
                host, port = local.split(":")
                found.append((proto.rstrip("6"), _hex_address(host), int(port, 16)))
    with open("/proc/%d/net/unix" % pid) as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[6]) in mine and int(fields[3], 16) & 0x10000:  # __SO_ACCEPTCON
                found.append(("unix", fields[7] if len(fields) > 7 else "", 0))
    return found


def tcp_ports(pid):
    """The TCP ports the process listens on that 127.0.0.1 reaches."""
    return sorted({port for proto, host, port in listening_sockets(pid)
                   if proto == "tcp" and host in ("127.0.0.1", "0.0.0.0", "::")})


# --- valid traffic and its mutations -----------------------------------------------------------

def http_get(port):
    return ("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUser-Agent: probe\r\n"
            "Accept: */*\r\n\r\n" % port).encode()


def _h2_frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(
        ">I", stream) + payload


def _hpack_literal(name, value):
    """A header field as a literal without indexing, new name, no Huffman coding."""
    out = b"\x00"
    for s in (name.encode(), value.encode()):
        assert len(s) < 127
        out += bytes([len(s)]) + s
    return out


def grpc_pull(port, c):
    """A whole gRPC call as a client sends it: preface, SETTINGS, HEADERS, DATA (a Pull)."""
    message = pb("PullRequest")(sender=c.me, names=["probe/small"]).SerializeToString()
    headers = b"".join(_hpack_literal(n, v) for n, v in (
        (":method", "POST"), (":scheme", "http"),
        (":path", "/pstrain.ParameterServerService/Pull"),
        (":authority", "127.0.0.1:%d" % port), ("content-type", "application/grpc"),
        ("te", "trailers")))
    body = b"\x00" + struct.pack(">I", len(message)) + message
    return (b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + _h2_frame(4, 0, 0, b"")
            + _h2_frame(1, 4, 1, headers) + _h2_frame(0, 1, 1, body))


def mutate(rng, seed):
    b = bytearray(seed)
    kind = rng.randrange(8)
    if kind == 0 and b:  # truncated
        return bytes(b[:rng.randrange(len(b))])
    if kind == 1 and b:  # a few bits flipped
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        return bytes(b)
    if kind == 2 and b:  # bytes overwritten
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    if kind == 3:  # random bytes inserted
        i = rng.randrange(len(b) + 1)
        return bytes(b[:i] + rng.randbytes(rng.randint(1, 64)) + b[i:])
    if kind == 4 and b:  # a slice deleted
        i = rng.randrange(len(b))
        return bytes(b[:i] + b[i + rng.randint(1, 32):])
    if kind == 5 and b:  # a slice repeated
        i = rng.randrange(len(b))
        j = min(len(b), i + rng.randint(1, 64))
        return bytes(b[:j] + b[i:j] * rng.randint(2, 20) + b[j:])
    if kind == 6:  # the whole message again (pipelined), then garbage
        return bytes(b * rng.randint(2, 4)) + rng.randbytes(rng.randint(0, 32))
    return bytes(b) + rng.randbytes(rng.randint(1, 256))  # trailing garbage


def payload(rng, seeds):
    """One connection's bytes: random, or a mutation (one or two deep) of a valid message."""
    kind = rng.random()
    if kind < 0.25:
        return rng.randbytes(rng.choice([0, 1, 9, 16, 24, 64, rng.randint(0, 4096)]))
    if kind < 0.3:
        return bytes([rng.choice([0x00, 0xff])]) * rng.choice([16, 64, 1024])
    seed = rng.choice(seeds)
    if rng.random() < 0.1:
        seed = seed[:rng.randrange(len(seed) + 1)] + rng.choice(seeds)  # spliced
    out = mutate(rng, seed)
    return mutate(rng, out) if rng.random() < 0.3 else out


def send(port, data, abort=False):
    """Connects to 127.0.0.1:port, sends `data` and reads until the server closes (after this
    side's EOF), so the server has taken the bytes when this returns; or resets at once."""
    with socket.create_connection(("127.0.0.1", port), timeout=READ_TIMEOUT) as s:
        try:
            s.sendall(data)
            if abort:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError, socket.timeout):
            pass  # the server may refuse before reading everything, or keep the line open


# --- the checks --------------------------------------------------------------------------------

class Checks:
    """Collects problems, so one run lists all of them."""

    def __init__(self, c):
        self.c, self.problems = c, []

    def alive_and_serving(self, after, before):
        self.c.check_alive(after)
        got = self.c.pull(before.keys())
        for name, value in before.items():
            if got.get(name) != value:
                self.problems.append("after %s: %r changed" % (after, name))
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.c.metrics_port,
                                    timeout=30) as r:
            if r.status != 200:
                self.problems.append("after %s: GET /metrics answered %d" % (after, r.status))

    def run(self, body):
        run_checks(self.c, self.problems, body, " (PSTRAIN_PROBE_SEED=%d)" % SEED)


def test_bytes_on_every_port_of_a_ucx_ps_leave_it_serving(cluster):
    c, checks = cluster, Checks(cluster)

    def body():
        before = ready(c)
        pid = c.tasks["ps:0"].proc.pid
        ports = tcp_ports(pid)
        for port in ports:
            for data in (b"\xff" * 16, b"\xff" * 64, random.Random(port).randbytes(64)):
                send(port, data)
                checks.alive_and_serving("%d bytes to port %d" % (len(data), port), before)
        grpc_port = int(c.addr["ps:0"].rsplit(":", 1)[1])
        expected = {("tcp", "127.0.0.1", grpc_port), ("tcp", "127.0.0.1", c.metrics_port)}
        found = set(listening_sockets(pid))
        if found != expected:
            checks.problems.append(
                "ps:0 (--transport ucx) listens on %s besides its gRPC and metrics ports"
                % sorted(found - expected))

    checks.run(body)


def test_ten_thousand_connections_leave_every_value_unchanged(cluster):
    c, checks = cluster, Checks(cluster)

    def body():
        before = ready(c)
        ports = tcp_ports(c.tasks["ps:0"].proc.pid)
        assert len(ports) >= 2, "ps:0 listens on %s: not its gRPC and metrics ports" % ports
        seeds = [http_get(p) for p in ports] + [grpc_pull(p, c) for p in ports]

        def connection(i):
            rng = random.Random("%d/%d" % (SEED, i))
            try:
                send(ports[i % len(ports)], payload(rng, seeds), abort=rng.random() < 0.1)
            except (ConnectionRefusedError, socket.timeout):
                pass  # a dead server: the check after this batch names it

        started = time.monotonic()
        step = CONNECTIONS // 10
        with concurrent.futures.ThreadPoolExecutor(PARALLEL) as pool:
            for first in range(0, CONNECTIONS, step):
                list(pool.map(connection, range(first, first + step)))
                c.check_alive("connections %d to %d" % (first, first + step - 1))
        checks.alive_and_serving("%d connections over ports %s in %.1f s" % (
            CONNECTIONS, ports, time.monotonic() - started), before)

    checks.run(body)
