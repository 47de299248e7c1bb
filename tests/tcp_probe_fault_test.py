"""The PS's TCP data plane (`--transport tcp`) probed from outside, as anyone who can reach its
port may do.

ps:0 runs with `--transport tcp` in the cluster of probe/cluster.py, every task under one job token
(PSTRAIN_AUTH_TOKEN); worker:1 also runs with `--transport tcp` and trains over it when the job
ends the legitimate way. The probe asks the PS for its TCP port (the DataPlane RPC, over gRPC with
the token) and speaks transport/tcp_wire.h itself: TcpFrame | WireRequest + token | data, answered
WireResponse | message | head | tensor bytes. Controls: a correct hello and pull return exactly
what a gRPC pull returns, and a correct push of a known gradient applies exactly as sgd does. Then:

- bytes that are no frame (16 and 64 bytes of 0xff, random bytes), a frame header, a WireRequest
  and a token cut short, a header below and above its bounds, another TCP or WireRequest magic,
  token_bytes that disagree with the header;
- frames declaring 2^40 data bytes (and 2^30 + 1, one past the limit), before and after a hello
  and with a wrong token: refused from the header alone (the PS's VmRSS does not grow); a real
  push head whose frame declares 2^30 bytes, on 8 connections, none sent: answered from the head
  (the PS's VmSize does not grow by them);
- a hello with a wrong token, a token cut short, none: UNAUTHENTICATED; a push or pull before the
  hello: FAILED_PRECONDITION; a hello of another protocol, a second hello, an unknown method, a
  wrong token after a good hello; pushes whose head does not parse, whose bytes do not match their
  shapes or whose sender is wrong (answered, and the connection serves on);
- a connection that says nothing (closed at the 10 s hello timeout), half a frame header and half
  a push left stalled while legitimate pulls are served promptly, a client SIGKILLed in the middle
  of a 4 MB push, and 600 connections at once (the PS holds 512 and closes the rest). The 60 s
  frame timeout is not waited for: the stalled connections are closed by the probe.

After each, every process is alive, a legitimate pull over TCP (a new connection: hello, pull) and
over gRPC returns the values held before, nothing was applied (values, versions, the PS's push
count), and where the PS answers or logs, it names the reason: the answer's code, id and message,
and the PS's log line closing that connection (found by the probe's port). A client that goes away
(EOF, reset) is not logged, by design. The PS's connections on its TCP port and their threads end.
The job then ends the legitimate way and every process exits 0.

The probe's side of the wire (frames, connections, the client killed mid-push, the checks after
each case and the reading of the PS's /proc) is in probe/tcp.py.
"""

import os
import random
import resource
import socket
import struct
import tempfile
import time

import pytest

from probe import wire
from probe.cluster import Cluster
from probe.tcp import (
    FAILED_PRECONDITION, FRAME, HELLO, HELLO_DATA, HELLO_TIMEOUT, INVALID_ARGUMENT, IO_TIMEOUT,
    MAX_CONNECTIONS, MAX_REQUEST_BYTES, OK, PULL, PUSH, TCP_MAGIC, TOKEN, UNAUTHENTICATED,
    WIRE_MAGIC, Checks, Conn, closed_among, connections, connections_end, f32, frame, header,
    hello_frame, kill_mid_push, push_body, push_frame, tcp_pull, threads, values_of, vm_rss,
    vm_size, with_token)
from probe.wire import pb

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
OTHER_TOKEN = "0" * 64
SECURITY_ENV = ("PSTRAIN_AUTH_TOKEN", "PSTRAIN_AUTH_TOKEN_FILE", "PSTRAIN_TLS_CERT",
                "PSTRAIN_TLS_KEY", "PSTRAIN_TLS_CA")
SENDER_CODES = {7, 9, 16}  # PERMISSION_DENIED, FAILED_PRECONDITION, UNAUTHENTICATED

MID_ELEMENTS = 1 << 20  # a 4 MB variable: a push of it takes more than one socket buffer
VARIABLES = {"dense0/kernel": ([784, 10], "glorot_uniform", {"seed": 7}),
             "dense0/bias": ([10], "zeros", {}),
             "probe/small": ([3, 2], "constant", {"value": 1.5}),
             "probe/mid": ([MID_ELEMENTS], "uniform", {"low": -1, "high": 1, "seed": 5}),
             "probe/control": ([4], "constant", {"value": 1.5})}
LEARNING_RATE = 0.1  # Cluster.create_variable's sgd
RSS_SLACK = 64 << 20  # what the PS's resident memory may grow by across the oversized frames
PROMPT = 5.0  # seconds a legitimate pull may take while connections are stalled


# --- the cluster -------------------------------------------------------------------------------

class TcpCluster(Cluster):
    """The probe's cluster with a job token, ps:0 and worker:1 on `--transport tcp`."""

    def start(self):
        tcp = ["--transport", "tcp"]
        super().start({"ps:0": tcp, "worker:1": tcp})
        for p in self.peers.values():
            p.channel = with_token(p.channel)
            p._calls = {}

    @property
    def ps_pid(self):
        return self.tasks["ps:0"].proc.pid

    def ps_log(self):
        with open(self.tasks["ps:0"].err_path, errors="replace") as f:
            return f.read()

    def tcp_port(self):
        out = self.ps.call("DataPlane", pb("DataPlaneRequest")(sender=self.me))
        if not out.ok:
            raise AssertionError("DataPlane: %r" % out)
        return out.response.tcp_port

    def pushes(self):
        return self.stats().pushes_by_worker[0]


@pytest.fixture
def cluster(monkeypatch):
    if not BINARY or not os.path.exists(BINARY):
        pytest.fail("PSTRAIN_BINARY=%r is not a built pstrain binary" % BINARY)
    with tempfile.TemporaryDirectory(prefix="pstrain-tcp-probe-") as tmp:
        for name in SECURITY_ENV:
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("PSTRAIN_AUTH_TOKEN", TOKEN)
        c = TcpCluster(tmp, BINARY, SOURCE_DIR)
        c.tmp = tmp
        c.start()
        monkeypatch.delenv("PSTRAIN_AUTH_TOKEN")  # the test's own process stays out of it
        try:
            yield c
        finally:
            c.kill_all()


def ready(c):
    """Registers as worker 0, creates the variables; returns the TCP port and the values."""
    c.register()
    c.wait_configured()
    for name, (shape, kind, init) in VARIABLES.items():
        c.create_variable(name, shape, kind, **init)
    port = c.tcp_port()
    assert 0 < port < 65536, "ps:0 (--transport tcp) announces TCP port %d" % port
    return port, c.pull()


# --- the control -------------------------------------------------------------------------------

def control(c, port, checks):
    """A correct hello and pull return what gRPC pulls; a correct push applies exactly as sgd."""
    names = list(VARIABLES)
    got, grpc_values = tcp_pull(c, port, names), c.pull(names)
    if got != grpc_values:
        checks.problems.append("a pull over TCP differs from one over gRPC in %s" % sorted(
            n for n in names if got.get(n) != grpc_values.get(n)))
    version, _, shape, data = grpc_values["probe/control"]
    grad = (1.0, -2.0, 0.5, 4.0)  # times the rate, each is exact in float32: one rounding
    conn = Conn(port)
    hello = conn.hello()
    checks.answered("the control's hello", hello, OK, "")
    a = conn.push(c, [("probe/control", version, shape, struct.pack("<4f", *grad))])
    checks.answered("the control's push", a, OK, "")
    if a is not None and a.code == OK:
        resp = pb("PushResponse")()
        resp.ParseFromString(a.head)
        if list(resp.versions) != [version + 1]:
            checks.problems.append("the control's push answered versions %s, expected [%d]"
                                   % (list(resp.versions), version + 1))
    a = conn.pull(c, ["probe/control"], req_id=4)
    conn.close()
    expected = struct.pack("<4f", *[f32(w + f32(-LEARNING_RATE) * g) for w, g in
                                    zip(struct.unpack("<4f", data), grad)])
    for how, v in (("TCP", a and a.code == OK and values_of(a).get("probe/control")),
                   ("gRPC", c.pull(["probe/control"])["probe/control"])):
        if not v or v[0] != version + 1 or v[3] != expected:
            checks.problems.append(
                "the control's push was not applied exactly (pulled over %s): version %s -> %s, "
                "values %s, expected %s" % (how, version, v and v[0],
                                            v and struct.unpack("<4f", v[3]),
                                            struct.unpack("<4f", expected)))


# --- malformed frames and credentials ----------------------------------------------------------

def test_malformed_frames_and_wrong_credentials_are_refused(cluster):
    c = cluster

    def body():
        port, _ = ready(c)
        control(c, port, checks)
        small = checks.baseline(port)["probe/small"]
        ones = ("probe/small", small[0], [3, 2], struct.pack("<6f", *[1.0] * 6))

        # Cut short, then closed: the client went away (not logged).
        hello = hello_frame()
        for what, data in (("5 bytes of a frame header", hello[:5]),
                           ("a frame header and 10 bytes of its WireRequest", hello[:16 + 10]),
                           ("a frame header, its WireRequest and half its token",
                            hello[:16 + 32 + 32]),
                           ("a hello without its last data byte", hello[:-1])):
            conn = Conn(port)
            conn.send(data)
            conn.sock.shutdown(socket.SHUT_WR)
            if conn.answer() is not None:
                checks.problems.append("%s: answered" % what)
            checks.closes(what, conn)
            checks.unchanged(what)

        # Bytes that are no frame (closed unanswered, logged), and headers out of bounds or
        # malformed.
        rng = random.Random(20240606)
        no_frame = "INVALID_ARGUMENT: not a pstrain TCP frame"
        cases = [
            ("16 bytes of 0xff", b"\xff" * 16, None, no_frame),
            ("64 bytes of 0xff", b"\xff" * 64, None, no_frame),
            ("64 random bytes", rng.randbytes(64), None, no_frame),
            ("4096 random bytes", rng.randbytes(4096), None, no_frame),
            ("a frame whose header is 16 bytes (less than a WireRequest)",
             FRAME.pack(TCP_MAGIC, 16, 13) + header(HELLO, 13)[:16], None,
             "a header of 16 bytes"),
            ("a frame whose header is 5000 bytes (past 4096)",
             FRAME.pack(TCP_MAGIC, 5000, 13) + header(HELLO, 13, token="x" * 4968), None,
             "a header of 5000 bytes"),
            ("a frame of another TCP magic", struct.pack("<I", TCP_MAGIC ^ 1) + hello[4:], None,
             "not a pstrain TCP frame"),
            ("a WireRequest of another magic", frame(HELLO, HELLO_DATA, magic=WIRE_MAGIC ^ 1),
             INVALID_ARGUMENT, "malformed header"),
            ("a WireRequest whose token_bytes exceed its header",
             frame(HELLO, HELLO_DATA, token_bytes=len(TOKEN) + 1), INVALID_ARGUMENT,
             "malformed header"),
            ("a WireRequest whose token_bytes are 2^32 - 1",
             frame(HELLO, HELLO_DATA, token_bytes=0xffffffff), INVALID_ARGUMENT,
             "malformed header"),
        ]
        for what, data, code, reason in cases:
            conn = Conn(port)
            try:
                conn.send(data)
            except (BrokenPipeError, ConnectionResetError):
                pass
            a = conn.answer()
            if code is None and a is not None:
                checks.problems.append("%s: answered %r" % (what, a))
            elif code is not None:
                checks.answered(what, a, code, reason)
            checks.closes(what, conn)
            checks.logged(what, conn.local_port, reason)
            checks.unchanged(what)

        # 2^40 data bytes (and one past the limit): refused before anything is allocated.
        rss = vm_rss(c.ps_pid)
        push_head, _ = push_body(c, [ones])
        tera = 1 << 40
        too_big = (INVALID_ARGUMENT, "a data-plane request of ")
        for what, said_hello, data, (code, reason) in (
                ("a push of 2^40 bytes before the hello", False,
                 frame(PUSH, push_head, data_bytes=tera), too_big),
                ("a hello of 2^40 bytes", False, frame(HELLO, b"", head_bytes=13, data_bytes=tera),
                 (INVALID_ARGUMENT, "a data-plane hello of %d bytes" % tera)),
                ("a push of 2^40 bytes after the hello", True,
                 frame(PUSH, push_head, data_bytes=tera), too_big),
                ("a pull of 2^40 bytes with a head of 2^32 - 1 after the hello", True,
                 frame(PULL, b"", head_bytes=0xffffffff, data_bytes=tera), too_big),
                ("a push of 2^30 + 1 bytes after the hello", True,
                 frame(PUSH, push_head, data_bytes=MAX_REQUEST_BYTES + 1), too_big),
                ("a push of 2^40 bytes with a wrong token", False,
                 frame(PUSH, push_head, data_bytes=tera, token=OTHER_TOKEN),
                 (UNAUTHENTICATED, "lacks the job's token"))):
            conn = Conn(port)
            if said_hello:
                checks.answered(what + ": its hello", conn.hello(), OK, "")
            conn.send(data)  # the frame and header only: none of the bytes it declares
            checks.answered(what, conn.answer(), code, reason)
            checks.closes(what, conn)
            checks.logged(what, conn.local_port, reason)
            checks.unchanged(what)
        grown = vm_rss(c.ps_pid) - rss
        if grown > RSS_SLACK:
            checks.problems.append("ps:0's VmRSS grew by %d MB across the oversized frames"
                                   % (grown >> 20))

        # A push whose head names a real variable but whose frame declares 2^30 bytes, on 8
        # connections at once, with none of the bytes sent: answered from the head, before the
        # PS reserves anything for them (its address space does not grow by them).
        size = vm_size(c.ps_pid)
        held = []
        for i in range(8):
            conn = Conn(port)
            checks.answered("a 2^30-byte push head %d: its hello" % i, conn.hello(), OK, "")
            conn.send(frame(PUSH, push_head, data_bytes=MAX_REQUEST_BYTES, req_id=30 + i))
            checks.answered("a 2^30-byte push head %d" % i, conn.answer(), INVALID_ARGUMENT,
                            "gradients need 24")
            held.append(conn)
        grown = vm_size(c.ps_pid) - size
        if grown > (256 << 20):
            checks.problems.append("ps:0's VmSize grew by %d MB for 8 pushes that declared 1 GB "
                                   "and sent nothing" % (grown >> 20))
        for conn in held:
            conn.close()
        checks.unchanged("the 2^30-byte push heads")

        # Credentials and the hello: answered, closed, logged.
        head, grad_bytes = push_body(c, [ones])
        cases = [
            ("a hello with a wrong token", [hello_frame(OTHER_TOKEN)], UNAUTHENTICATED,
             "lacks the job's token"),
            ("a hello with no token (token_bytes 0)", [hello_frame("")], UNAUTHENTICATED,
             "lacks the job's token"),
            ("a hello with the token but its last digit", [hello_frame(TOKEN[:-1])],
             UNAUTHENTICATED, "lacks the job's token"),
            ("a pull before the hello", [frame(PULL, pb("PullRequest")(
                sender=c.me, names=["probe/small"]).SerializeToString())], FAILED_PRECONDITION,
             "before the connection's hello"),
            ("a push of ones before the hello", [push_frame(c, [ones], req_id=1)],
             FAILED_PRECONDITION, "before the connection's hello"),
            ("a hello of another protocol", [hello_frame(data=b"pstrain-tcp-2")],
             INVALID_ARGUMENT, "another protocol or version"),
            ("a second hello", [hello, hello_frame(req_id=2)], INVALID_ARGUMENT,
             "a second hello"),
            ("an unknown method after the hello", [hello, frame(9, b"x", req_id=2)],
             INVALID_ARGUMENT, "method 9"),
            ("a push of ones with a wrong token after the hello",
             [hello, frame(PUSH, head + grad_bytes, head_bytes=len(head), token=OTHER_TOKEN,
                           req_id=2)], UNAUTHENTICATED, "lacks the job's token"),
        ]
        for what, sends, code, reason in cases:
            conn = Conn(port)
            for i, data in enumerate(sends):
                conn.send(data)
                a = conn.answer()
                if i < len(sends) - 1:
                    checks.answered(what + ": its hello", a, OK, "")
            a = checks.answered(what, a, code, reason)
            if a is not None and a.id != len(sends):
                checks.problems.append("%s: answered id %d, not %d" % (what, a.id, len(sends)))
            checks.closes(what, conn)
            checks.logged(what, conn.local_port, reason)
            checks.unchanged(what)

        # Pushes the PS refuses on a connection that serves on.
        conn = Conn(port)
        checks.answered("a hello before refused pushes", conn.hello(), OK, "")
        garbage = b"\xff\xff\xff\xff\x0f"
        short = ("probe/small", small[0], [3, 2], struct.pack("<5f", *[1.0] * 5))
        big_shape = ("probe/small", small[0], [1 << 62], b"")
        for i, (what, data, codes, reason) in enumerate((
                ("a push whose head does not parse", frame(PUSH, garbage + b"\0" * 24,
                                                           head_bytes=5, req_id=10),
                 {INVALID_ARGUMENT}, "does not parse"),
                ("a push of 20 bytes for a [3, 2] gradient", push_frame(c, [short], req_id=11),
                 {INVALID_ARGUMENT}, "gradients need 24"),
                ("a push of shape [2^62] with no bytes", push_frame(c, [big_shape], req_id=12),
                 {INVALID_ARGUMENT}, "probe/small"),
                ("a push of ones and 4 bytes more",
                 frame(PUSH, head + grad_bytes + b"\0" * 4, head_bytes=len(head), req_id=13),
                 {INVALID_ARGUMENT}, "28 tensor bytes"),
                ("a push of ones from worker 0 of another incarnation",
                 push_frame(c, [ones], sender=wire.sender("worker", 0, c.incarnation ^ 1),
                            req_id=14), SENDER_CODES, ""),
                ("a push of ones from job \"nobody\"",
                 push_frame(c, [ones], sender=wire.sender("nobody", 0, 1), req_id=15),
                 SENDER_CODES, ""))):
            conn.send(data)
            a = conn.answer()
            if a is None:
                checks.problems.append("%s: closed unanswered" % what)
                break
            if a.code not in codes or reason not in a.message or not a.message:
                checks.problems.append("%s: answered %r, expected one of %s naming %r"
                                       % (what, a, sorted(codes), reason))
            if a.id != 10 + i:
                checks.problems.append("%s: answered id %d" % (what, a.id))
            checks.unchanged(what)
        else:
            a = conn.pull(c, ["probe/small"], req_id=20)
            if a is None or a.code != OK or values_of(a) != {"probe/small": small}:
                checks.problems.append("a pull on the connection of the refused pushes: %r" % a)
        conn.close()

    checks = Checks(c)
    checks.run(body)


# --- stalled, killed and surplus connections ---------------------------------------------------

def test_stalled_killed_and_surplus_connections_leave_the_ps_serving(cluster):
    c = cluster

    def body():
        port, _ = ready(c)
        before = checks.baseline(port)
        pid = c.ps_pid
        mid = before["probe/mid"]
        mid_grad = ("probe/mid", mid[0], [MID_ELEMENTS], struct.pack("<f", 1.0) * MID_ELEMENTS)
        base_threads = threads(pid)

        # Says nothing: closed within the hello timeout (waited for below, meanwhile the rest).
        silent = Conn(port, timeout=HELLO_TIMEOUT + IO_TIMEOUT)
        silent_opened = time.monotonic()

        # Slowloris: half a frame header; a hello, then half a push. A pull is served meanwhile.
        header_half = Conn(port)
        header_half.send(hello_frame()[:8])
        stalled = Conn(port)
        checks.answered("the stalled push's hello", stalled.hello(), OK, "")
        data = push_frame(c, [mid_grad])
        stalled.send(data[:len(data) // 2])
        stalled_at = time.monotonic()
        for _ in range(3):
            started = time.monotonic()
            got = tcp_pull(c, port, list(before))
            took = time.monotonic() - started
            if took > PROMPT:
                checks.problems.append("a legitimate pull over TCP took %.1f s beside stalled "
                                       "connections" % took)
            if got != before:
                checks.problems.append("a pull beside half a push returned other values")
        c.check_alive("half a push left stalled")
        for what, conn in (("half a frame header", header_half), ("half a push", stalled)):
            if conn.closed_by_peer(timeout=0.01):
                checks.problems.append("ps:0 closed the connection of %s within %.0f s, before "
                                       "its frame timeout" % (what, time.monotonic() - stalled_at))
            conn.close()
        checks.unchanged("half a frame header and half a push, stalled, then closed")

        # A client SIGKILLed in the middle of a push of the 4 MB variable.
        kill_mid_push(checks, port, os.path.join(c.tmp, "push.bin"), push_frame(c, [mid_grad]))
        checks.unchanged("a client SIGKILLed in the middle of a 4 MB push")

        # The silent connection: closed by the PS, which names the hello timeout.
        if not silent.closed_by_peer(timeout=max(0.1, silent_opened + HELLO_TIMEOUT + IO_TIMEOUT
                                                 - time.monotonic())):
            checks.problems.append("ps:0 kept a connection that said nothing open %.0f s" % (
                time.monotonic() - silent_opened))
        elif time.monotonic() - silent_opened < HELLO_TIMEOUT - 1:
            checks.problems.append("ps:0 closed a connection that said nothing after %.1f s, "
                                   "before its hello timeout" % (time.monotonic() - silent_opened))
        silent.close()
        checks.logged("a connection that said nothing", silent.local_port, "DEADLINE_EXCEEDED")

        # Their connections and threads end.
        connections_end(checks, pid, port, base_threads,
                        "stalled, killed and silent connections")

        # 600 connections at once, past the 512 the PS serves.
        want = 600
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < want + 100:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, want + 1000), hard))
        conns = []
        try:
            for _ in range(want):
                conns.append(Conn(port))
            c.check_alive("%d connections at once" % want)
            # Served meanwhile over gRPC; over TCP a new connection is one too many.
            if c.pull(list(before)) != before:
                checks.problems.append("a gRPC pull beside %d TCP connections returned other "
                                       "values" % want)
            refused = closed_among(conns, want - MAX_CONNECTIONS)
            if len(refused) != want - MAX_CONNECTIONS:
                checks.problems.append("ps:0 closed %d of %d connections at once (expected %d "
                                       "past its %d)" % (len(refused), want,
                                                         want - MAX_CONNECTIONS, MAX_CONNECTIONS))
            held = connections(pid, port)
            if held != MAX_CONNECTIONS:
                checks.problems.append("ps:0 holds %d connections of %d opened at once, not its "
                                       "%d" % (held, want, MAX_CONNECTIONS))
            ports = {"127.0.0.1:%d:" % x.local_port for x in refused}
            deadline = time.monotonic() + IO_TIMEOUT
            while True:
                said = [l for l in c.ps_log().splitlines() if "refused a connection from" in l]
                if any(p in l for l in said for p in ports) and any(
                        "%d are open already" % MAX_CONNECTIONS in l for l in said):
                    break
                if time.monotonic() > deadline:
                    checks.problems.append("ps:0 did not log refusing a connection past its "
                                           "%d: %s" % (MAX_CONNECTIONS, said or "nothing"))
                    break
                time.sleep(0.05)
        finally:
            for x in conns:
                x.close()
        c.check_alive("%d connections closed" % want)
        checks.unchanged("%d connections at once, then closed" % want)
        connections_end(checks, pid, port, base_threads, "%d connections" % want)

        # The PS still applies a legitimate push over TCP, exactly.
        control(c, port, checks)

    checks = Checks(c)
    checks.run(body)
