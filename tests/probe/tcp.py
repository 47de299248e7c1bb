"""The PS's TCP data plane (transport/tcp_wire.h) as an outside client speaks it.

Frames are built by hand, so a probe can send any of them cut short, out of bounds or with the
wrong token; a Conn is one TCP connection to the PS that reads its answers, and kill_mid_push
leaves a push half sent by a client process it SIGKILLs. Checks collects what a probe finds:
after each case the PS still serves a legitimate pull over TCP and over gRPC with the values held
before, and its log names why it closed a connection. The rest reads the PS's process in /proc:
its memory, threads and connections.

The cluster runs under one job token (TOKEN, unless told otherwise), which the probe's gRPC calls
carry too (with_token). Checks and tcp_pull take the probe's cluster (probe/cluster.py's Cluster,
playing worker 0) with ps:0 on `--transport tcp`; Checks also asks it for the PS's log
(`ps_log()`) and its count of worker 0's pushes (`pushes()`).
"""

import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

import grpc

from probe.cluster import ServerDied, run_checks
from probe.wire import pb

# The job token the probe's cluster runs under (PSTRAIN_AUTH_TOKEN): what frames carry by default.
TOKEN = "5c0ffee15bad1dea0ddba11f00dcafe0123456789abcdef0fedcba9876543210"

# transport/tcp_wire.h and transport/ucx_wire.h, little-endian, natural alignment.
TCP_MAGIC = 0x50535443
WIRE_MAGIC = 0x50535558
PUSH, PULL, HELLO = 1, 2, 3
HELLO_DATA = b"pstrain-tcp-1"
FRAME = struct.Struct("<IIQ")  # TcpFrame: magic, header_bytes, data_bytes
REQUEST = struct.Struct("<IIQQII")  # WireRequest: magic, method, id, conn, token_bytes, head_bytes
RESPONSE = struct.Struct("<IiQIIQ")  # WireResponse: magic, code, id, message, head, tensor bytes
assert (FRAME.size, REQUEST.size, RESPONSE.size) == (16, 32, 32)
MAX_REQUEST_BYTES = 1 << 30  # kMaxWireRequestBytes
MAX_CONNECTIONS = 512  # kMaxTcpConnections
HELLO_TIMEOUT = 10  # kTcpHelloTimeout, seconds
# absl::StatusCode
OK, INVALID_ARGUMENT, UNAUTHENTICATED, FAILED_PRECONDITION = 0, 3, 16, 9

IO_TIMEOUT = 10.0  # seconds for the PS to answer or close; a legitimate pull's bound
THREAD_SLACK = 8  # threads the PS may start meanwhile besides connections' (gRPC's pool grows)


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


# --- the token over gRPC -----------------------------------------------------------------------

class _Details(grpc.ClientCallDetails):
    def __init__(self, d, metadata):
        self.method, self.timeout, self.metadata = d.method, d.timeout, metadata
        self.credentials, self.wait_for_ready = d.credentials, d.wait_for_ready
        self.compression = getattr(d, "compression", None)


class _WithToken(grpc.UnaryUnaryClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call, as pstrain's own channels do."""

    def __init__(self, token):
        self.token = token

    def intercept_unary_unary(self, continuation, details, request):
        metadata = list(details.metadata or []) + [("authorization", "Bearer " + self.token)]
        return continuation(_Details(details, metadata), request)


def with_token(channel, token=TOKEN):
    """`channel` with the job token on every call (the DataPlane RPC that names the TCP port)."""
    return grpc.intercept_channel(channel, _WithToken(token))


# --- frames ------------------------------------------------------------------------------------

def header(method, head_bytes, token=TOKEN, req_id=1, magic=WIRE_MAGIC, token_bytes=None):
    token = token.encode() if isinstance(token, str) else token
    return REQUEST.pack(magic, method, req_id, 0, len(token) if token_bytes is None
                        else token_bytes, head_bytes) + token


def frame(method, data=b"", head_bytes=None, data_bytes=None, token=TOKEN, req_id=1, **kw):
    """One request's bytes: TcpFrame | WireRequest + token | data."""
    h = header(method, len(data) if head_bytes is None else head_bytes, token, req_id, **kw)
    return FRAME.pack(TCP_MAGIC, len(h), len(data) if data_bytes is None else data_bytes) + h + data


def hello_frame(token=TOKEN, data=HELLO_DATA, req_id=1):
    return frame(HELLO, data, token=token, req_id=req_id)


def push_body(c, grads, sender=None):
    """A push's head (serialized PushRequest, gradients without data) and its bytes."""
    head = pb("PushRequest")(sender=sender or c.me, gradients=[
        pb("Gradient")(name=n, read_version=v, gradient=pb("TensorProto")(dtype=1, shape=shape))
        for n, v, shape, _ in grads]).SerializeToString()
    return head, b"".join(g[3] for g in grads)


def push_frame(c, grads, sender=None, req_id=3):
    head, data = push_body(c, grads, sender)
    return frame(PUSH, head + data, head_bytes=len(head), req_id=req_id)


# --- connections -------------------------------------------------------------------------------

class Closed(Exception):
    pass


class Answer:
    def __init__(self, code, req_id, message, head, tensor):
        self.code, self.id, self.message, self.head, self.tensor = (
            code, req_id, message, head, tensor)

    def __repr__(self):
        return "code %d %r" % (self.code, self.message[:300])


class Conn:
    """One TCP connection to the PS."""

    def __init__(self, port, timeout=IO_TIMEOUT):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.local_port = self.sock.getsockname()[1]

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def _exact(self, n):
        out = bytearray()
        while len(out) < n:
            try:
                got = self.sock.recv(min(n - len(out), 1 << 20))
            except ConnectionResetError:
                got = b""
            if not got:
                raise Closed("closed with %d of %d bytes to go" % (n - len(out), n))
            out += got
        return bytes(out)

    def answer(self):
        """The next response, or None if the PS closes the connection first."""
        try:
            magic, code, req_id, m, h, t = RESPONSE.unpack(self._exact(RESPONSE.size))
        except Closed:
            return None
        assert magic == WIRE_MAGIC, "an answer of magic %#x" % magic
        assert m < (64 << 20) and h < (64 << 20) and t <= MAX_REQUEST_BYTES, (m, h, t)
        return Answer(code, req_id, self._exact(m).decode(errors="replace"), self._exact(h),
                      self._exact(t))

    def closed_by_peer(self, timeout=IO_TIMEOUT):
        """Whether the PS closes the connection (EOF or reset) within `timeout`; what it sends
        meanwhile is dropped."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
            return True
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def hello(self, token=TOKEN):
        self.send(hello_frame(token))
        return self.answer()

    def pull(self, c, names, req_id=2):
        data = pb("PullRequest")(sender=c.me, names=list(names)).SerializeToString()
        self.send(frame(PULL, data, req_id=req_id))
        return self.answer()

    def push(self, c, grads, sender=None, req_id=3):
        """grads: [(name, read_version, shape, float32 bytes)]."""
        self.send(push_frame(c, grads, sender, req_id))
        return self.answer()


def values_of(answer):
    """{name: (version, dtype, shape, bytes)} of a pull's answer, as Cluster.pull returns them."""
    resp = pb("PullResponse")()
    resp.ParseFromString(answer.head)
    out, offset = {}, 0
    for v in resp.values:
        n = 4
        for d in v.value.shape:
            n *= d
        out[v.name] = (v.version, v.value.dtype, tuple(v.value.shape),
                       answer.tensor[offset:offset + n])
        offset += n
    assert offset == len(answer.tensor), "a pull answer of %d tensor bytes for %d" % (
        len(answer.tensor), offset)
    return out


def tcp_pull(c, port, names, timeout=IO_TIMEOUT):
    """A legitimate pull over a new TCP connection (hello, pull); retried until `timeout` while
    the PS refuses the connection (closes it unanswered)."""
    deadline = time.monotonic() + timeout
    while True:
        c.check_alive("a legitimate pull over TCP")
        why = None
        try:
            conn = Conn(port)
            try:
                a = conn.hello()
                if a is not None and a.code != OK:
                    raise AssertionError("a legitimate hello: %r" % a)
                if a is not None:
                    a = conn.pull(c, names)
                    if a is not None and a.code != OK:
                        raise AssertionError("a legitimate pull over TCP of %s: %r" % (names, a))
                    if a is not None:
                        return values_of(a)
                why = "closed unanswered"
            finally:
                conn.close()
        except OSError as e:
            why = repr(e)
        if time.monotonic() > deadline:
            raise ServerDied("ps:0 serves no legitimate pull over TCP within %.0f s: %s"
                             % (timeout, why))
        time.sleep(0.1)


def closed_among(conns, expected, timeout=3.0):
    """The connections of `conns` the PS closes (none of them sent a byte): waits until
    `expected` are, or `timeout`, then a moment more for any past that."""
    by_fd = {x.sock.fileno(): x for x in conns}
    poller = select.poll()
    for fd in by_fd:
        poller.register(fd, select.POLLIN)
    closed = []
    deadline = time.monotonic() + timeout
    extra = None
    while True:
        now = time.monotonic()
        if len(closed) >= expected and extra is None:
            extra = now + 0.3
        end = min(deadline, extra) if extra is not None else deadline
        if now >= end:
            return closed
        for fd, _ in poller.poll(max(1, int((end - now) * 1000))):
            poller.unregister(fd)
            closed.append(by_fd[fd])  # readable, from a peer that says nothing: EOF or reset


# A client that says hello, sends half of a push and then more of it slowly, never all: argv is
# the PS's port, the file of its bytes (the hello, then the push) and the hello's length.
_PUSHING_CHILD = r"""
import socket, sys, time
port, path, hello_bytes = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
with open(path, "rb") as f:
    data = f.read()
hello, push = data[:hello_bytes], data[hello_bytes:]
s = socket.create_connection(("127.0.0.1", port), timeout=30)
s.sendall(hello)
answer = b""
while len(answer) < 32:
    got = s.recv(32 - len(answer))
    if not got:
        sys.exit(3)
    answer += got
if answer[4:8] != b"\0\0\0\0":
    sys.exit(4)
half = len(push) // 2
s.sendall(push[:half])
print("half", flush=True)
for i in range(half, len(push) * 3 // 4, 65536):  # still sending, never the whole push
    s.sendall(push[i:i + 65536])
    time.sleep(0.02)
time.sleep(600)
"""


def kill_mid_push(checks, port, path, push):
    """A client process SIGKILLed in the middle of `push` (a push frame's bytes), sent after a
    hello on a new connection; its bytes go through the file `path`."""
    hello = hello_frame()
    with open(path, "wb") as f:
        f.write(hello + push)
    child = subprocess.Popen([sys.executable, "-c", _PUSHING_CHILD, str(port), path,
                              str(len(hello))], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = child.stdout.readline()
        if line.strip() != b"half":
            raise AssertionError("the pushing child did not get half way: exit %s, %r %r" % (
                child.poll(), line, child.stderr.read()[-500:]))
        if child.poll() is not None:
            raise AssertionError("the pushing child exited %d" % child.returncode)
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
        child.stdout.close()
        child.stderr.close()
    if child.returncode != -signal.SIGKILL:
        checks.problems.append("the pushing child ended %d, not by SIGKILL" % child.returncode)


# --- the PS's process --------------------------------------------------------------------------

def proc_status(pid, field):
    """A number of /proc/<pid>/status: VmSize and VmRSS in bytes, Threads as a count."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                n = int(line.split()[1])
                return n * 1024 if field.startswith("Vm") else n
    raise AssertionError("no %s for %d" % (field, pid))


def vm_size(pid):
    return proc_status(pid, "VmSize")


def vm_rss(pid):
    return proc_status(pid, "VmRSS")


def threads(pid):
    return proc_status(pid, "Threads")


def connections(pid, port):
    """How many connections on `port` the process holds (its listener aside): sockets of its
    descriptors in /proc/<pid>/net/tcp{,6} in any state but LISTEN."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(int(target[len("socket:["):-1]))
    n = 0
    for proto in ("tcp", "tcp6"):
        with open("/proc/%d/net/%s" % (pid, proto)) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if (int(fields[9]) in inodes and fields[3] != "0A"
                        and int(fields[1].rsplit(":", 1)[1], 16) == port):
                    n += 1
    return n


# --- the checks --------------------------------------------------------------------------------

class Checks:
    """Collects problems, so one run lists all of them."""

    def __init__(self, c):
        self.c, self.problems = c, []
        self.port, self.before, self.pushes = None, {}, 0

    def baseline(self, port):
        """What every later check compares with: the values and the push count now."""
        self.port, self.before, self.pushes = port, self.c.pull(), self.c.pushes()
        return self.before

    def unchanged(self, after):
        """Alive; a legitimate pull over TCP and over gRPC returns the values held before."""
        self.c.check_alive(after)
        names = list(self.before)
        for how, got in (("TCP", tcp_pull(self.c, self.port, names)), ("gRPC", self.c.pull(names))):
            for name, value in self.before.items():
                v = got.get(name)
                if v != value:
                    self.problems.append("after %s: %r changed (pulled over %s): version %s -> "
                                         "%s, %s" % (after, name, how, value[0], v and v[0],
                                                     "same bytes" if v and v[3] == value[3]
                                                     else "bytes differ"))
        pushes = self.c.pushes()
        if pushes != self.pushes:
            self.problems.append("after %s: the PS counted %d push(es) of worker 0"
                                 % (after, pushes - self.pushes))

    def answered(self, what, a, code, contains):
        if a is None:
            self.problems.append("%s: closed unanswered, expected code %d" % (what, code))
        elif a.code != code:
            self.problems.append("%s: answered %r, expected code %d" % (what, a, code))
        elif contains not in a.message:
            self.problems.append("%s: message %r does not mention %r" % (what, a.message,
                                                                          contains))
        return a

    def closes(self, what, conn):
        if not conn.closed_by_peer():
            self.problems.append("%s: the PS kept the connection open %.0f s" % (what, IO_TIMEOUT))
        conn.close()

    def logged(self, what, local_port, reason, timeout=IO_TIMEOUT):
        """The PS's log says why it closed the connection from `local_port`."""
        mark = "127.0.0.1:%d: " % local_port
        deadline = time.monotonic() + timeout
        while True:
            lines = [l for l in self.c.ps_log().splitlines()
                     if "TCP data plane: closed the connection from" in l and mark in l]
            if any(reason in l for l in lines):
                return
            if time.monotonic() > deadline:
                self.problems.append("%s: ps:0 logged no closing of the connection from port %d "
                                     "naming %r (it logged %s)" % (what, local_port, reason,
                                                                  lines or "nothing"))
                return
            time.sleep(0.05)

    def run(self, body):
        run_checks(self.c, self.problems, body)


def connections_end(checks, pid, port, base_threads, after, timeout=IO_TIMEOUT):
    """The PS closes every connection on its TCP port and their threads end."""
    deadline = time.monotonic() + timeout
    while connections(pid, port) or threads(pid) > base_threads + THREAD_SLACK:
        if time.monotonic() > deadline:
            checks.problems.append("after %s: ps:0 holds %d connections on its TCP port and runs "
                                   "%d threads (%d before)" % (after, connections(pid, port),
                                                               threads(pid), base_threads))
            return
        time.sleep(0.05)
