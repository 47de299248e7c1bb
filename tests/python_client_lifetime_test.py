"""What a pstrain.Client's arrays and calls do past their documented span, against a real
cluster (a chief with --model external and a PS of $PSTRAIN_BINARY on 127.0.0.1):

- an array of pull() (or lookup()) read after create_variable() (create_table(), a bigger
  lookup()) still holds the values it was pulled with, instead of reading freed memory;
- a call made in a child process after os.fork() raises pstrain.errors.ForkedProcessError at once
  (it used to hang), the child exits cleanly, and the parent's client goes on working.

Each case runs as a worker script in a subprocess, so that a crash is its exit status.
"""

import os
import signal
import sys
import textwrap

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import PYTHON, make_cluster  # noqa: E402,F401

PREAMBLE = """
import os, sys, time
import numpy as np
import pstrain
from pstrain import errors
SGD1 = pstrain.optim.SGD(lr=1.0)
client = pstrain.Client.connect(timeout=30)
"""


def run_worker(cluster, script, timeout):
    """Runs PREAMBLE + `script` as worker 0; its Process once it ended."""
    p = cluster.start_worker(0, [PYTHON, "-c", PREAMBLE + textwrap.dedent(script)])
    code = p.wait(timeout)
    return code, p


def test_arrays_outlive_create_variable_and_bigger_lookups(make_cluster):
    cluster = make_cluster(1, 1, {"task_timeout": 60})
    code, p = run_worker(cluster, """
        client.create_variable("w", (512, 1024), pstrain.init.Constant(1.5), SGD1)
        client.create_table("emb", 64, pstrain.init.Constant(0.25), SGD1)
        w, = client.pull()
        rows, = client.lookup([np.arange(4, dtype=np.uint64)])
        first = rows.copy()
        # Each create_variable rebuilds the client's buffers; the bigger lookup reallocates its
        # rows. The memory the old arrays viewed must not be handed back.
        for i in range(4):
            client.create_variable("v%d" % i, (512, 1024), pstrain.init.Constant(2.0), SGD1)
        client.lookup([np.arange(100000, dtype=np.uint64)])
        client.create_table("emb2", 8)
        junk = [np.full((512, 1024), 7.0, np.float32) for _ in range(8)]
        assert w.shape == (512, 1024) and np.all(w == 1.5), (w.min(), w.max())
        np.testing.assert_array_equal(rows, first)
        print("ok", flush=True)
        client.done()
    """, timeout=60)
    assert code != -signal.SIGSEGV, "the worker crashed with SIGSEGV\n" + p.output()
    assert code == 0 and "ok" in p.stdout, p.output()
    cluster.finish()


def test_a_call_in_a_forked_child_raises_at_once(make_cluster):
    cluster = make_cluster(1, 1, {"task_timeout": 60})
    code, p = run_worker(cluster, """
        client.create_variable("w", (4,), pstrain.init.Constant(1.0), SGD1)
        client.pull()
        pid = os.fork()
        if pid == 0:
            try:
                client.pull()
                print("child: pull returned", flush=True)
                os._exit(3)
            except errors.ForkedProcessError as e:
                print("child:", type(e).__name__, e, flush=True)
                # A normal exit destroys the inherited client in the child: it must not hang.
                sys.exit(0)
        for _ in range(100):  # 10 s
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                break
            time.sleep(0.1)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("parent: the child hung", flush=True)
            sys.exit(4)
        print("parent: child status", status, flush=True)
        assert status == 0
        # The parent's client is untouched by the child.
        client.push([np.ones(4, np.float32)])
        w, = client.pull()
        assert np.all(w == 0.0), w
        client.done()
    """, timeout=60)
    assert code == 0, p.output()
    out = p.stdout
    assert "child: ForkedProcessError" in out, p.output()
    assert "os.fork()" in out and "connect again in the child" in out, out
    cluster.finish()
