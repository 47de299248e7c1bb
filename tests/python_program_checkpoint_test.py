"""Checkpoints of client programs (--model external) on real clusters: a chief and PS processes
of $PSTRAIN_BINARY on 127.0.0.1, the test's own process as the worker.

A program's job saved after 3 of 6 steps and restored into 1 and into 3 PS goes on to exactly
the values (bits) of the job that ran the 6 steps without a stop: values, Adam's slots and
update counts, and the table's rows and Adagrad accumulators come back. pstrain.load_checkpoint
equals the job's final pull, bit for bit. A program that creates a restored variable with
another shape or optimizer gets an error naming both; what the checkpoint holds and no program
creates is named in one warning.
"""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import make_cluster  # noqa: E402,F401

import pstrain  # noqa: E402
from pstrain import errors  # noqa: E402

ADAM = pstrain.optim.Adam(lr=0.01)
ADAGRAD = pstrain.optim.Adagrad(lr=0.1)
KEYS = np.array([3, 17, 2 ** 63 + 5, 40, 41], np.uint64)


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def create(client, w_shape=(50, 8), w_optimizer=ADAM, table=True):
    client.create_variable("w", w_shape, pstrain.init.Uniform(-1, 1, seed=3), w_optimizer,
                           partitioner="fixed:2")
    client.create_variable("b", (8,), pstrain.init.Constant(0.1), ADAM)
    if table:
        client.create_table("emb", 4, pstrain.init.Uniform(-0.5, 0.5, seed=4), ADAGRAD)


def train(client, steps):
    """Steps `steps` (a range): the gradients of step k are drawn from seed k alone."""
    for k in steps:
        rng = np.random.default_rng(k)
        client.pull()
        client.lookup([KEYS])
        client.push([rng.standard_normal((50, 8)).astype(np.float32),
                     rng.standard_normal(8).astype(np.float32)], examples=10)
        client.push_sparse([KEYS[k % 3:]], [rng.standard_normal((5 - k % 3, 4))
                                            .astype(np.float32)])


def state(client):
    """Every parameter as the PS hold it: w, b and the table's rows of KEYS."""
    w, b = (v.copy() for v in client.pull())
    return {"w": w, "b": b, "emb": client.lookup([KEYS])[0].copy()}


def run(make_cluster, num_ps, mode, steps, flags=()):
    """A job of one program that creates the parameters and trains `steps`: its first and final
    state, and its result."""
    cluster = make_cluster(num_ps, 1, dict({"mode": mode, "task_timeout": 60}, **dict(flags)))
    client = cluster.connect(0, timeout=30)
    create(client)
    first = state(client)
    train(client, steps)
    final = state(client)
    client.done()
    return first, final, cluster.finish()


def assert_same(got, want):
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_array_equal(bits(got[name]), bits(want[name]), err_msg=name)


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_a_restored_job_goes_on_bit_for_bit(make_cluster, tmp_path, mode):
    _, whole, _ = run(make_cluster, 2, mode, range(6))
    saved = tmp_path / "saved"
    _, half, result = run(make_cluster, 2, mode, range(3), {"checkpoint_dir": saved})
    ckpt = pstrain.load_checkpoint(saved)
    assert ckpt.path.endswith("ckpt-%d" % ckpt.global_step)
    # The final checkpoint is the job's final pull, bit for bit.
    assert list(ckpt.variables) == ["w", "b"] and list(ckpt.tables) == ["emb"]
    assert_same({k: ckpt.variables[k] for k in ("w", "b")}, {k: half[k] for k in ("w", "b")})
    keys, rows = ckpt.tables["emb"]
    order = {int(k): i for i, k in enumerate(keys)}
    np.testing.assert_array_equal(bits(rows[[order[int(k)] for k in KEYS]]), bits(half["emb"]))
    for num_ps in (1, 3):
        first, final, _ = run(make_cluster, num_ps, mode, range(3, 6),
                              {"restore_from": saved})
        assert_same(first, half)
        assert_same(final, whole)


def test_another_shape_or_optimizer_is_refused_and_the_rest_is_warned_of(make_cluster,
                                                                          tmp_path):
    saved = tmp_path / "saved"
    run(make_cluster, 2, "async", range(2), {"checkpoint_dir": saved})
    cluster = make_cluster(1, 1, {"task_timeout": 60, "restore_from": saved})
    client = cluster.connect(0, timeout=30)
    with pytest.raises(errors.InvalidArgumentError,
                       match=r"variable 'w' has shape \[50, 8\] there, not \[50, 9\]"):
        create(client, w_shape=(50, 9), table=False)
    with pytest.raises(errors.InvalidArgumentError,
                       match="variable 'w' was trained with optimizer adam, the job's is sgd"):
        create(client, w_optimizer=pstrain.optim.SGD(lr=0.1), table=False)
    # Nothing of the refused creates is left: "b" alone is restored and trained.
    assert client.create_variable("b", (8,), None, ADAM) == 0
    (b,) = client.pull()
    np.testing.assert_array_equal(bits(b), bits(pstrain.load_checkpoint(saved).variables["b"]))
    client.push([np.ones(8, np.float32)])
    client.done()
    cluster.finish()
    log = cluster.chief.output()
    warnings = [l for l in log.splitlines() if "that no program created" in l]
    assert len(warnings) == 1, log
    assert "2 parameters" in warnings[0] and "variable 'w', table 'emb'" in warnings[0], log


def test_a_plain_torch_model_from_the_checkpoint_gives_the_jobs_accuracy(tmp_path):
    """examples/python/mnist_torch.py on tasks with --checkpoint_dir: the job's final checkpoint
    loaded into a plain nn.Module (pstrain.torch.load_state_dict) scores exactly the test
    accuracy worker 0 reported from its final pull."""
    import json
    import re
    import subprocess

    import pstrain.torch
    import torch

    source = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
    examples = os.path.join(source, "examples", "python")
    sys.path.insert(0, examples)
    import mnist_torch  # noqa: E402

    binary = os.environ["PSTRAIN_BINARY"]
    data = os.path.join(source, "data", "mnist")
    r = subprocess.run([binary, "launch", "--ps", "2", "--workers", "2", "--rows", "6400",
                        "--epochs", "1", "--checkpoint_dir", str(tmp_path / "ckpt"),
                        "--log_dir", str(tmp_path / "logs"), "--",
                        "/usr/bin/python3", os.path.join(examples, "mnist_torch.py"), "--data",
                        data, "--epochs", "1"], capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    reported = json.loads(re.search(r"worker:0 result: (\{.*\})", r.stderr).group(1))
    torch.set_num_threads(1)
    model = mnist_torch.Net()
    assert pstrain.torch.load_state_dict(model, tmp_path / "ckpt") == []
    x, y = mnist_torch.load_split(data, "t10k")
    assert round(mnist_torch.accuracy(model, x, y), 4) == reported["test_accuracy"]
