"""pstrain.Client against real clusters: a chief (--model external) and PS processes of
$PSTRAIN_BINARY on 127.0.0.1, the test's own process (or a script it starts) as the worker.

Bit-exact round trips (SGD with lr=1 turns w into exactly w - g), pulled arrays that own their
buffers, gradients read in place, the dtype rule, every bad input of issue 9, Ctrl-C in a
waiting pull, tables, and a client shared by threads.
"""

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import (  # noqa: E402,F401
    BINARY, PYTHON, free_ports, interrupt, make_cluster, tagged_pids, wait_for)

import pstrain  # noqa: E402
from pstrain import errors  # noqa: E402

SGD1 = pstrain.optim.SGD(lr=1.0)


def address(a):
    return a.__array_interface__["data"][0]


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def connected(make_cluster, num_ps=1, num_workers=1, **chief_flags):
    cluster = make_cluster(num_ps, num_workers, dict({"task_timeout": 60}, **chief_flags))
    return cluster, cluster.connect(0, timeout=30)


def test_pull_push_round_trip_is_bit_exact(make_cluster):
    cluster, client = connected(make_cluster, num_ps=2, mode="sync")
    assert (client.mode, client.num_ps, client.num_workers, client.task, client.global_step) == (
        "sync", 2, 1, 0, 0)
    # w is split over both PS (its pull assembles shards into a buffer of the client), b and s
    # come whole from one PS (the pull points into the response).
    uniform = pstrain.init.Uniform(-1, 1, seed=7)
    assert client.create_variable("w", (300, 7), uniform, SGD1, partitioner="fixed:2") == 0
    assert client.create_variable("b", [7], pstrain.init.Constant(0.5), SGD1) == 1
    assert client.create_variable("s", (), None, SGD1) == 2
    values = client.pull()
    assert [v.shape for v in values] == [(300, 7), (7,), ()]
    assert all(v.dtype == np.float32 for v in values)
    # Each array views a buffer of its own, which its base holds (not the client's buffer).
    assert [address(v) for v in values] == client._last_pull_addresses()
    assert all(v.base is not None and v.base is not client for v in values)
    assert np.all(values[1] == 0.5) and values[2] == 0
    w, b, s = (v.copy() for v in values)

    rng = np.random.default_rng(1)
    g = [rng.standard_normal(v.shape).astype(np.float32) for v in (w, b, s)]
    client.push(g, examples=8, loss=0.5)
    assert client._last_push_addresses() == [address(x) for x in g]  # read in place
    values = client.pull()
    assert client.global_step == 1 and client.pushes == 1
    for got, before, grad in zip(values, (w, b, s), g):
        np.testing.assert_array_equal(bits(got), bits(before - grad))

    # float64, non-contiguous and big-endian gradients are converted to float32 copies.
    w, b, s = (v.copy() for v in values)
    g64 = rng.standard_normal((300, 7))
    wide = rng.standard_normal((7, 2)).astype(np.float32)
    big = np.array(0.75, dtype=">f4")
    client.push([g64, wide[:, 1], big])
    pushed = client._last_push_addresses()
    assert pushed[0] != address(g64) and pushed[1] != address(wide) and pushed[2] != address(big)
    values = client.pull()
    np.testing.assert_array_equal(bits(values[0]), bits(w - g64.astype(np.float32)))
    np.testing.assert_array_equal(bits(values[1]), bits(b - wide[:, 1]))
    assert values[2] == np.float32(s) - np.float32(0.75)
    # Anything with the buffer protocol: a float32 memoryview is read in place.
    grads = [np.zeros((300, 7), np.float32), memoryview(np.ones(7, np.float32)), np.zeros(())]
    client.push(grads)
    assert client._last_push_addresses()[1] == address(np.asarray(grads[1]))
    client.done()
    assert cluster.finish()["global_step"] == 3


def test_sixteen_bit_pushes_apply_the_rounded_gradient(make_cluster):
    # SGD with lr=1: the PS subtracts exactly the gradient the wire carried. numpy's float16
    # and a bit-level bfloat16 (round to nearest even) are the references.
    rng = np.random.default_rng(3)
    g = (rng.standard_normal(1000) * 10).astype(np.float32)
    u = g.view(np.uint32).astype(np.uint64)
    bf16 = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    for dtype, rounded in (("float16", g.astype(np.float16).astype(np.float32)),
                           ("bfloat16", bf16)):
        assert np.any(rounded != g)  # the rounding shows
        cluster = make_cluster(1, 1, {"task_timeout": 60})
        client = cluster.connect(0, timeout=30, push_dtype=dtype)
        client.create_variable("w", (1000,), pstrain.init.Constant(0.5), SGD1)
        client.pull()
        client.push([g])
        (after,) = client.pull()
        np.testing.assert_array_equal(bits(after), bits(np.float32(0.5) - rounded))
        client.done()
        cluster.finish()
    with pytest.raises(errors.InvalidArgumentError, match="push_dtype.*float8"):
        pstrain.Client.connect(chief="127.0.0.1:1", task=0, timeout=1.0, push_dtype="float8")


DATA_PLANE_SCRIPT = textwrap.dedent("""
    import json, os, sys, numpy as np, pstrain
    with pstrain.Client.connect(timeout=60) as client:
        client.create_variable("w", (1000,))
        before = client.data_plane
        client.pull()
        client.push([np.ones(1000, np.float32)])
        client.pull()
        with open(sys.argv[1], "w") as f:
            json.dump({"env": os.environ.get("PSTRAIN_TRANSPORT"), "before": before,
                       "after": client.data_plane}, f)
""")


@pytest.mark.parametrize("transport", [None, "ucx", "auto", "tcp"])
def test_launch_gives_a_worker_command_its_transport(tmp_path, transport):
    # `pstrain launch --transport T -- COMMAND`: the script's Client takes T from
    # PSTRAIN_TRANSPORT, and its channel to the PS is UCX for ucx and auto (the PS serve UCX),
    # TCP for tcp.
    tag = "%d-%s" % (os.getpid(), transport)
    out = tmp_path / "data_plane.json"
    argv = [BINARY, "launch", "--ps", "1", "--workers", "1"]
    if transport:
        argv += ["--transport", transport]
    argv += ["--", PYTHON, "-c", DATA_PLANE_SCRIPT, str(out)]
    env = dict(os.environ, PSTRAIN_TEST_TAG=tag, TMPDIR=str(tmp_path))
    env.pop("TF_CONFIG", None)
    env.pop("PSTRAIN_TRANSPORT", None)
    try:
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    finally:
        for pid in tagged_pids(tag):
            os.kill(pid, 9)
    assert r.returncode == 0, "launch exited %d:\n%s" % (r.returncode, r.stderr[-3000:])
    got = json.loads(out.read_text())
    assert got["env"] == (transport or "grpc")
    assert got["before"] == [""]
    assert got["after"] == [{None: "grpc", "tcp": "tcp"}.get(transport, "ucx")]


def test_an_unknown_transport_is_refused_at_connect():
    with pytest.raises(errors.InvalidArgumentError, match='unknown transport "rdma"'):
        pstrain.Client.connect(chief="127.0.0.1:1", task=0, timeout=1.0, transport="rdma")


def test_pulled_arrays_outlive_the_client(make_cluster):
    cluster, client = connected(make_cluster)
    client.create_variable("w", (4,), pstrain.init.Constant(3.0))
    values = client.pull()
    client.done()
    ref = weakref.ref(client)
    del client
    gc.collect()
    assert ref() is None and np.all(values[0] == 3.0)
    cluster.finish()


def test_bad_input_raises_with_the_cpp_message(make_cluster):
    cluster, client = connected(make_cluster, mode="sync")
    with pytest.raises(errors.FailedPreconditionError, match="Pull before any CreateVariable"):
        client.pull()
    client.create_variable("w", (4, 3), pstrain.init.Constant(1.0), SGD1)
    with pytest.raises(errors.FailedPreconditionError, match="without a Pull"):
        client.push([np.zeros((4, 3), np.float32)])
    with pytest.raises(errors.InvalidArgumentError, match=r"shape \[4, 3\].*\[3, 4\]"):
        client.create_variable("w", (3, 4))
    with pytest.raises(errors.InvalidArgumentError, match="pstrain.optim object"):
        client.create_variable("v", (2,), optimizer="adam")
    with pytest.raises(errors.InvalidArgumentError, match="pstrain.init object"):
        client.create_variable("v", (2,), initializer=0.5)
    (w,) = client.pull()
    with pytest.raises(errors.InvalidArgumentError, match="push of 0 gradients for 1 variables"):
        client.push([])
    with pytest.raises(errors.InvalidArgumentError, match=r"gradient for w has shape \[3, 4\]"):
        client.push([np.zeros((3, 4), np.float32)])
    for bad in (np.zeros((4, 3), np.int32), np.zeros((4, 3), np.int64),
                np.zeros((4, 3), bool), np.zeros((4, 3), np.complex64),
                np.zeros((4, 3), object), np.array(["a"]), None, "text", b"\0" * 48):
        with pytest.raises(errors.InvalidArgumentError) as e:
            client.push([bad])
        dtype = np.asarray(bad).dtype
        assert "gradient 0 (\"w\") has dtype %s" % dtype in str(e.value), str(e.value)
    with pytest.raises(errors.InvalidArgumentError, match="is not an array"):
        client.push([[1.0, [2.0, 3.0]]])  # ragged: numpy refuses it
    with pytest.raises(TypeError):
        client.push(5)  # not a sequence
    # Nothing was sent: the step is still the first, and a good push applies exactly.
    g = np.full((4, 3), 0.25, np.float32)
    client.push([g])
    (after,) = client.pull()
    assert client.global_step == 1
    np.testing.assert_array_equal(after, np.full((4, 3), 0.75, np.float32))

    client.done()
    for call in (client.pull, lambda: client.push([g]), lambda: client.create_variable("x", ()),
                 lambda: client.barrier("b"), client.done):
        with pytest.raises(errors.FailedPreconditionError, match=r"Done\(\) was (already )?called"):
            call()
    assert client.global_step == 1 and client.mode == "sync"
    cluster.finish()


def test_tf_config_that_does_not_parse(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{\"cluster\": {\"chief\": [\"h:1\"],")
    with pytest.raises(errors.InvalidArgumentError, match="TF_CONFIG.*line 1"):
        pstrain.Client.connect()
    with pytest.raises(errors.InvalidArgumentError, match="TF_CONFIG.*line 1"):
        pstrain.cluster_from_tf_config()
    monkeypatch.setenv("TF_CONFIG", "{\"cluster\": {\"chief\": [\"127.0.0.1:1\"], \"ps\": "
                       "[\"127.0.0.1:2\"], \"worker\": [\"127.0.0.1:3\"]}, "
                       "\"task\": {\"type\": \"ps\", \"index\": 0}}")
    with pytest.raises(errors.InvalidArgumentError, match="worker"):
        pstrain.Client.connect()
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(errors.InvalidArgumentError, match="TF_CONFIG"):
        pstrain.Client.connect()
    with pytest.raises(errors.InvalidArgumentError):
        pstrain.ClusterSpec({"ps": ["127.0.0.1:2"]})  # no chief, no worker
    with pytest.raises(errors.InvalidArgumentError, match="dict of jobs or JSON text"):
        pstrain.ClusterSpec(5)
    spec = pstrain.ClusterSpec("{\"chief\": [\"a:1\"], \"ps\": [\"b:2\", \"c:3\"], "
                               "\"worker\": [\"d:4\"]}")
    assert (spec.num_tasks("ps"), spec.address("ps", 1), spec.task_type) == (2, "c:3", None)
    with pytest.raises(errors.InvalidArgumentError, match="ps"):
        spec.address("ps", 2)
    assert pstrain.ClusterSpec(spec.to_json()).jobs == spec.jobs


def test_unreachable_chief_times_out():
    (port,) = free_ports(1)
    start = time.monotonic()
    with pytest.raises(errors.DeadlineExceededError, match="127.0.0.1:%d" % port) as e:
        pstrain.Client.connect(chief="127.0.0.1:%d" % port, task=0, timeout=1.0)
    assert isinstance(e.value, TimeoutError) and time.monotonic() - start < 10
    with pytest.raises(errors.InvalidArgumentError, match="timeout must be positive"):
        pstrain.Client.connect(chief="127.0.0.1:%d" % port, task=0, timeout=0)
    with pytest.raises(errors.InvalidArgumentError, match="task must be an int"):
        pstrain.Client.connect(chief="127.0.0.1:%d" % port, task="0", timeout=1.0)
    with pytest.raises(errors.InvalidArgumentError, match="host:port"):
        pstrain.Client.connect(chief=port, task=0, timeout=1.0)
    with pytest.raises(errors.InvalidArgumentError, match="task -1"):
        pstrain.Client.connect(chief="127.0.0.1:%d" % port, task=-1, timeout=1.0)


CTRL_C_SCRIPT = textwrap.dedent("""
    import sys, time, numpy as np, pstrain
    client = pstrain.Client.connect(timeout=60)
    client.create_variable("w", (3,))
    client.pull()
    client.push([np.ones(3, np.float32)])
    print("waiting", flush=True)
    try:
        client.pull()  # the step needs worker 1's push, which never comes
        print("pull returned", flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    print("alive", sum(range(10)), flush=True)
""")


def test_ctrl_c_interrupts_a_waiting_pull(make_cluster):
    cluster = make_cluster(1, 2, {"mode": "sync", "task_timeout": 300})
    script = cluster.start_worker(0, [PYTHON, "-c", CTRL_C_SCRIPT])
    other = cluster.connect(1, timeout=60)  # returns once worker 0 registered too
    assert (other.num_workers, other.task) == (2, 1)
    other.create_variable("w", (3,))
    other.pull()
    wait_for(lambda: "waiting" in script.stdout or script.popen.poll() is not None, 60,
             "the script's first push\n" + cluster.output())
    time.sleep(0.5)  # inside the pull, which waits for the step
    assert script.popen.poll() is None, script.output()
    interrupt(script)
    assert script.wait(20) == 0, script.output()
    assert "alive 45" in script.stdout and "pull returned" not in script.stdout
    other.done()


def test_table_round_trip(make_cluster):
    cluster, client = connected(make_cluster, num_ps=2, mode="sync")
    with pytest.raises(errors.FailedPreconditionError):
        client.lookup([[1]])
    assert client.create_table("emb", 3, pstrain.init.Uniform(-1, 1, seed=5), SGD1) == 0
    keys = np.array([3, 2 ** 63 + 5, 17, 0], np.uint64)
    (rows,) = client.lookup([keys])
    assert rows.shape == (4, 3) and rows.dtype == np.float32
    assert client._last_lookup_addresses() == [address(rows)] and rows.base is not client
    rows = rows.copy()
    # The same keys as Python ints and as int64 read the same rows.
    np.testing.assert_array_equal(client.lookup([[3, 2 ** 63 + 5, 17, 0]])[0], rows)
    np.testing.assert_array_equal(client.lookup([keys[[0, 2]].astype(np.int64)])[0],
                                  rows[[0, 2]])
    (empty,) = client.lookup([[]])
    assert empty.shape == (0, 3)
    for bad, message in (([1, -1], "negative key -1 at position 1"),
                         (np.array([1.5]), "dtype float64"), ([True], "holds True"),
                         ([2.0], "holds 2.0"), ([2 ** 64], "the key 18446744073709551616"),
                         (np.array([-2], np.int32), "negative key -2"),
                         (np.zeros((2, 2), np.uint64), "2 dimensions"),
                         ([4, 4], "4")):
        with pytest.raises(errors.InvalidArgumentError, match=message):
            client.lookup([bad])
    with pytest.raises(errors.InvalidArgumentError):
        client.lookup([keys, keys])  # keys of two tables, one created

    client.lookup([keys])
    g = np.random.default_rng(2).standard_normal((4, 3)).astype(np.float32)
    with pytest.raises(errors.InvalidArgumentError, match=r"shape \[3, 3\], not \[4, 3\]"):
        client.push_sparse([keys], [g[:3]])  # a row short
    with pytest.raises(errors.InvalidArgumentError, match=r"shape \[3, 4\]"):
        client.push_sparse([keys], [g.T])  # as many floats, in the wrong rows
    with pytest.raises(errors.InvalidArgumentError):
        client.push_sparse([keys], [g.ravel()[:11]])  # flat, a float short (the C++ check)
    with pytest.raises(errors.InvalidArgumentError, match="dtype int64"):
        client.push_sparse([keys], [g.astype(np.int64)])
    client.push_sparse([keys], [g.ravel()])  # flat rows are fine
    (after,) = client.lookup([keys])
    np.testing.assert_array_equal(bits(after), bits(rows - g))
    client.done()
    cluster.finish()


def test_optimizer_objects_reach_the_ps(make_cluster):
    cluster, client = connected(make_cluster, mode="sync", optimizer="sgd", lr=0.5)
    one = pstrain.init.Constant(1.0)
    client.create_variable("chief", (2,), one)  # the chief's optimizer: sgd, lr 0.5
    client.create_variable("momentum", (2,), one, pstrain.optim.SGD(lr=1.0, momentum=0.5))
    client.create_variable("adam", (2,), one, pstrain.optim.Adam(lr=0.01))
    ones = [np.ones(2, np.float32)] * 3
    client.pull()
    client.push(ones)
    first = [v.copy() for v in client.pull()]  # the next pull reuses the buffers
    client.push(ones)
    second = client.pull()
    np.testing.assert_array_equal(first[0], [0.5, 0.5])
    np.testing.assert_array_equal(second[0], [0.0, 0.0])
    np.testing.assert_array_equal(first[1], [0.0, 0.0])  # v = 1, w = 1 - 1
    np.testing.assert_array_equal(second[1], [-1.5, -1.5])  # v = 0.5 + 1, w = 0 - 1.5
    np.testing.assert_allclose(first[2], [0.99, 0.99], rtol=1e-6)  # Adam's first step is lr
    np.testing.assert_allclose(second[2], [0.98, 0.98], rtol=1e-6)
    client.done()
    cluster.finish()


def test_optimizer_and_initializer_arguments_are_checked():
    optim, init = pstrain.optim, pstrain.init
    assert optim.Adam()._options() == {"name": "adam", "learning_rate": 1e-3, "clip_norm": 0.0,
                                       "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}
    assert optim.RMSprop(alpha=0.9)._options()["rho"] == 0.9
    assert optim.SGD(0.1, schedule=optim.StepLR(10, 0.5))._options()["schedule"] == {
        "kind": "step", "step_size": 10, "decay_rate": 0.5}
    assert init.TruncatedNormal(0, 0.1, seed=3)._options() == {
        "kind": "truncated_normal", "mean": 0.0, "stddev": 0.1, "seed": 3}
    for make, message in ((lambda: optim.Adam(betas=(1.0, 0.9)), r"betas\[0\] 1.0"),
                          (lambda: optim.SGD(lr=-1), "lr -1"),
                          (lambda: optim.SGD(lr="fast"), "lr must be a number"),
                          (lambda: optim.SGD(0.1, nesterov=True), "nesterov"),
                          (lambda: optim.Ftrl(0.1, lr_power=0.5), "lr_power"),
                          (lambda: optim.CosineLR(10, warmup_steps=10), "exceed"),
                          (lambda: init.Uniform(1, 0), "below"),
                          (lambda: init.Normal(std=-1), "std"),
                          (lambda: init.GlorotUniform(seed=-1), "seed")):
        with pytest.raises(errors.InvalidArgumentError, match=message):
            make()


def test_threads_share_one_client(make_cluster):
    cluster, client = connected(make_cluster)
    client.create_variable("w", (64,))
    failures = []

    def train():
        try:
            for _ in range(20):
                (w,) = client.pull()
                client.push([np.ones(64, np.float32)])
        except Exception as e:  # noqa: BLE001 (reported below)
            failures.append(e)

    threads = [threading.Thread(target=train) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not failures and client.pushes == 80
    client.done()
    assert cluster.finish()["worker_steps"] == [80]


def test_context_manager_reports_the_error(make_cluster):
    cluster = make_cluster(1, 1, {"task_timeout": 60})
    with pytest.raises(ValueError, match="boom"):
        with cluster.connect(0, timeout=30) as client:
            client.create_variable("w", (2,))
            raise ValueError("boom")
    assert cluster.chief.wait(30) != 0
    assert "ValueError: boom" in cluster.chief.stderr, cluster.output()
