"""A cluster of the pstrain binary on 127.0.0.1 for Python tests and benchmarks: PS tasks and a
chief in `--model external` mode as real processes (the binary: $PSTRAIN_BINARY); the workers are the caller's (Clients in its
threads, or processes it starts with worker_env())."""

import contextlib
import json
import os
import socket
import subprocess
import tempfile

def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


class Cluster:
    """`chief`: the chief's address; worker_env(i): an environment whose TF_CONFIG makes a
    process worker task i; `result`: the chief's JSON result once the cluster has ended."""

    def __init__(self, num_ps, num_workers):
        addr = ["127.0.0.1:%d" % p for p in free_ports(1 + num_ps + num_workers)]
        self.chief = addr[0]
        self.spec = {"chief": addr[:1], "ps": addr[1:1 + num_ps], "worker": addr[1 + num_ps:]}
        self.result = None

    def env(self, job, index):
        return dict(os.environ, TF_CONFIG=json.dumps(
            {"cluster": self.spec, "task": {"type": job, "index": index}}))

    def worker_env(self, index):
        return self.env("worker", index)


@contextlib.contextmanager
def cluster(num_ps, num_workers, *chief_flags, timeout=60):
    """Starts the PS and the chief (with `chief_flags`) and yields the Cluster. On leaving the
    block normally, waits up to `timeout` s for them to end (every worker must have called
    done()) and asserts that they exited 0; on any exit kills whatever is left."""
    binary = os.environ.get("PSTRAIN_BINARY", "")
    assert binary and os.path.exists(binary), "PSTRAIN_BINARY=%r is not built" % binary
    c = Cluster(num_ps, num_workers)
    procs = []

    def start(job, index, argv):
        out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
        p = subprocess.Popen([binary, "server", "--connect_timeout", "60"] + argv,
                             env=c.env(job, index), stdin=subprocess.DEVNULL, stdout=out,
                             stderr=err, text=True)
        procs.append((p, out, err))

    try:
        for i in range(num_ps):
            start("ps", i, [])
        start("chief", 0, ["--job", "chief", "--model", "external"] + list(chief_flags))
        yield c
        for p, out, err in procs:
            p.wait(timeout=timeout)
            err.seek(0)
            assert p.returncode == 0, "%s exited %d: %s" % (p.args, p.returncode,
                                                           err.read()[-2000:])
        out = procs[-1][1]
        out.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("{")]
        c.result = json.loads(lines[-1]) if lines else None
    finally:
        for p, out, err in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            out.close()
            err.close()
