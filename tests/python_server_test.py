"""pstrain.Server: PS and chief tasks run in a Python process (as tf.distribute.Server), with
real gRPC on 127.0.0.1, workers being pstrain.Clients; keyword flags checked as `pstrain
server` checks its flags; Ctrl-C in join() raises KeyboardInterrupt and stops the job.
"""

import json
import os
import sys
import textwrap
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import (  # noqa: E402,F401
    PYTHON, free_ports, interrupt, make_cluster, wait_for)

import pstrain  # noqa: E402
from pstrain import errors  # noqa: E402


def local_spec(num_ps=1, num_workers=1):
    ports = ["127.0.0.1:%d" % p for p in free_ports(1 + num_ps + num_workers)]
    return {"chief": ports[:1], "ps": ports[1:1 + num_ps], "worker": ports[1 + num_ps:]}


def result_line(out):
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, out
    return json.loads(lines[-1])


def test_ps_and_chief_in_process(capfd):
    spec = local_spec()
    ps = pstrain.Server(spec, "ps", 0, connect_timeout=30, log_level="warn")
    chief = pstrain.Server(pstrain.ClusterSpec(spec), "chief", 0, mode="sync", optimizer="sgd",
                           lr=1.0, connect_timeout=30)
    assert (chief.job, chief.task, chief.exit_code, chief.join(timeout=0.1)) == (
        "chief", 0, None, None)
    with pstrain.Client.connect(chief=spec["chief"][0], task=0, timeout=30) as client:
        assert client.mode == "sync"
        client.create_variable("w", (3,), pstrain.init.Constant(2.0))  # the chief's sgd, lr 1
        client.pull()
        client.push([np.ones(3, np.float32)])
        (w,) = client.pull()
        np.testing.assert_array_equal(w, [1.0, 1.0, 1.0])
    assert chief.join(timeout=30) == 0
    assert ps.join(timeout=30) == 0 and ps.exit_code == 0
    result = result_line(capfd.readouterr().out)
    assert (result["global_step"], result["workers"], result["ps"]) == (1, 1, 1)


def test_ps_in_process_from_tf_config(make_cluster, monkeypatch):
    cluster = make_cluster(1, 1, start=False)
    cluster.start({"mode": "async", "optimizer": "sgd", "lr": 0.5}, start_ps=False)
    monkeypatch.setenv("TF_CONFIG", cluster.tf_config("ps", 0))
    ps = pstrain.Server(pstrain.cluster_from_tf_config(), connect_timeout=30)
    assert (ps.job, ps.task) == ("ps", 0)
    with cluster.connect(0, timeout=30) as client:
        client.create_variable("b", (2,), pstrain.init.Constant(1.0))
        client.pull()
        client.push([np.full(2, 2.0, np.float32)])
        (b,) = client.pull()
        np.testing.assert_array_equal(b, [0.0, 0.0])
    assert cluster.finish()["global_step"] == 1
    assert ps.join(timeout=30) == 0


def test_bad_server_arguments_raise():
    spec = local_spec()
    cases = [
        (dict(lrr=0.1), errors.InvalidArgumentError, "unknown flag lrr; did you mean lr?"),
        (dict(lr=-1), errors.InvalidArgumentError, "--lr"),
        (dict(mode="fast"), errors.InvalidArgumentError, "fast"),
        (dict(optimizer="adamw"), errors.InvalidArgumentError, "adamw"),
        (dict(staleness="x"), errors.InvalidArgumentError, "staleness"),
    ]
    for flags, error, message in cases:
        with pytest.raises(error, match=message):
            pstrain.Server(spec, "chief", 0, **flags)
    with pytest.raises(errors.InvalidArgumentError, match="ps or chief"):
        pstrain.Server(spec, "worker", 0)
    with pytest.raises(errors.InvalidArgumentError, match="ps"):
        pstrain.Server(spec, "ps", 1)
    with pytest.raises(errors.InvalidArgumentError, match="no task"):
        pstrain.Server(spec)
    with pytest.raises(errors.InvalidArgumentError, match="dict of jobs"):
        pstrain.Server(["127.0.0.1:1"], "ps", 0)


JOIN_SCRIPT = textwrap.dedent("""
    import json, sys, pstrain
    spec = json.loads(sys.argv[1])
    ps = pstrain.Server(spec, "ps", 0, connect_timeout=60, log_level="warn")
    chief = pstrain.Server(spec, "chief", 0, mode="sync", connect_timeout=60)
    print("serving", flush=True)
    try:
        chief.join()  # no worker ever comes
        print("join returned", flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", flush=True)
    print("exit codes", chief.join(timeout=20), ps.join(timeout=20), flush=True)
""")


def test_ctrl_c_interrupts_join_and_stops_the_job(make_cluster):
    cluster = make_cluster(1, 1, start=False)  # for its tag, log files and cleanup
    script = cluster.start_process("servers", [PYTHON, "-c", JOIN_SCRIPT,
                                               json.dumps(cluster.spec)], cluster.env("ps", 0))
    wait_for(lambda: "serving" in script.stdout or script.popen.poll() is not None, 30,
             "the servers\n" + script.output())
    time.sleep(1.0)  # the chief waits for the worker to register
    assert script.popen.poll() is None, script.output()
    interrupt(script)
    assert script.wait(30) == 0, script.output()
    # The chief stopped the job (failed: exit code 1) and shut the PS down (0: told to stop).
    assert "exit codes 1 " in script.stdout, script.output()
    assert "join returned" not in script.stdout
