"""Memory spent on refused requests is given back: a real `pstrain server` PS gets large pushes
that gRPC refuses (each over the 512 MiB message limit of docs/semantics.md), one at a time, and
its resident memory must then come back near where it started, without any further request.
"""

import json
import os
import socket
import subprocess
import tempfile
import time

import grpc
import pytest

from probe import wire

BINARY = os.environ.get("PSTRAIN_BINARY", "")
MIB = 1 << 20
PUSH_BYTES = 600 * MIB  # over kMaxMessageBytes (512 MiB)
PUSHES = 3
SLACK = 100 * MIB  # what the PS may keep above its starting RSS
DEADLINE_S = 30.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for pid %d" % pid)


def oversized_push():
    """A PushRequest of PUSH_BYTES bytes: one gradient that long. The server must refuse it by
    its size, before reading what it says."""
    tensor = wire.pb("TensorProto")(dtype=1, shape=[PUSH_BYTES // 4], data=bytes(PUSH_BYTES))
    req = wire.pb("PushRequest")(sender=wire.sender("worker", 0, 1))
    req.gradients.add(name="g", gradient=tensor)
    return req.SerializeToString()


@pytest.fixture
def ps_server():
    if not BINARY or not os.path.exists(BINARY):
        pytest.fail("PSTRAIN_BINARY=%r is not a built pstrain binary" % BINARY)
    with tempfile.TemporaryDirectory(prefix="pstrain-memory-") as tmp:
        addr = "127.0.0.1:%d" % free_port()
        cluster = {"cluster": {"chief": ["127.0.0.1:%d" % free_port()], "ps": [addr],
                               "worker": ["127.0.0.1:%d" % free_port()]}}
        path = os.path.join(tmp, "cluster.json")
        with open(path, "w") as f:
            json.dump(cluster, f)
        err_path = os.path.join(tmp, "ps.err")
        with open(err_path, "wb") as err:
            # No chief comes: the PS serves while it keeps trying to register.
            proc = subprocess.Popen([BINARY, "server", "--cluster", path, "--job", "ps",
                                     "--task", "0", "--connect_timeout", "600"],
                                    stdout=subprocess.DEVNULL, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        peer = wire.Peer(addr, "pstrain.ParameterServerService")
        try:
            yield proc, peer, err_path
        finally:
            peer.close()
            proc.kill()
            proc.wait()


def wait_serving(proc, peer, err_path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the PS exited: %s" % open(err_path).read()[-600:]
        out = peer.call("Stats", wire.pb("StatsRequest")(), timeout=2.0)
        if out.code != grpc.StatusCode.UNAVAILABLE:
            return
        time.sleep(0.1)
    raise AssertionError("the PS did not answer within %ds" % timeout)


def test_memory_of_refused_pushes_is_given_back(ps_server):
    proc, peer, err_path = ps_server
    wait_serving(proc, peer, err_path)
    start = rss_bytes(proc.pid)
    request = oversized_push()
    assert len(request) >= PUSH_BYTES - 64
    peak = start
    for i in range(PUSHES):
        out = peer.call("Push", request, timeout=120.0)
        assert out.code == grpc.StatusCode.RESOURCE_EXHAUSTED, "push %d: %r" % (i, out)
        assert proc.poll() is None, "the PS died: %s" % open(err_path).read()[-600:]
        peak = max(peak, rss_bytes(proc.pid))
    del request
    # Waits for the PS to give the memory back (a bounded poll: it must happen by itself).
    deadline = time.monotonic() + DEADLINE_S
    rss = rss_bytes(proc.pid)
    while rss > start + SLACK and time.monotonic() < deadline:
        time.sleep(0.1)
        rss = rss_bytes(proc.pid)
    assert rss <= start + SLACK, (
        "after %d refused pushes of %d MiB the PS holds %d MiB (started at %d MiB, peak %d MiB)"
        % (PUSHES, PUSH_BYTES // MIB, rss // MIB, start // MIB, peak // MIB))
    # And it still serves.
    out = peer.call("Stats", wire.pb("StatsRequest")(), timeout=10.0)
    assert out.code != grpc.StatusCode.UNAVAILABLE, out
