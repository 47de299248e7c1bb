"""pstrain.load_checkpoint on the checkpoint of a real job (pstrain launch, real processes on
127.0.0.1): the arrays are the checkpoint's, and the MNIST MLP evaluated from them in numpy
alone gives the test accuracy the job reported; `pstrain checkpoint inspect` agrees; damaged and
missing checkpoints raise the error that names them.
"""

import gzip
import json
import os
import subprocess

import numpy as np
import pytest

import pstrain

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
MNIST = os.path.join(SOURCE_DIR, "data", "mnist")


def read_idx(name):
    path = os.path.join(MNIST, name)
    opener = open if os.path.exists(path) else gzip.open
    with opener(path if os.path.exists(path) else path + ".gz", "rb") as f:
        data = f.read()
    ndims = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndims)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndims).reshape(dims)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A 2 PS, 2 worker MNIST MLP job (Adam) that saves a checkpoint at its end."""
    assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
    root = tmp_path_factory.mktemp("ckpt")
    argv = [BINARY, "launch", "--ps", "2", "--workers", "2", "--data", MNIST, "--hidden", "32",
            "--epochs", "1", "--batch", "128", "--optimizer", "adam", "--lr", "0.003",
            "--checkpoint_dir", str(root)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout.strip().splitlines()[-1])
    return root, result


def test_the_arrays_give_the_jobs_test_accuracy(job):
    root, result = job
    ckpt = pstrain.load_checkpoint(root)
    assert ckpt.global_step == result["global_step"]
    assert os.path.basename(ckpt.path) == "ckpt-%d" % result["global_step"]
    assert list(ckpt.variables) == ["dense0/kernel", "dense0/bias", "dense1/kernel",
                                    "dense1/bias"]
    shapes = [v.shape for v in ckpt.variables.values()]
    assert shapes == [(784, 32), (32,), (32, 10), (10,)]
    assert all(v.dtype == np.float32 and v.flags.c_contiguous for v in ckpt.variables.values())
    assert ckpt.tables == {}
    # The model, evaluated here without pstrain: relu(x W0 + b0) W1 + b1 on pixels / 255.
    x = read_idx("t10k-images-idx3-ubyte").reshape(-1, 784).astype(np.float32) / np.float32(255)
    y = read_idx("t10k-labels-idx1-ubyte")
    w0, b0, w1, b1 = ckpt.variables.values()
    logits = np.maximum(x @ w0 + b0, 0) @ w1 + b1
    accuracy = float(np.mean(np.argmax(logits, axis=1) == y))
    # The job rounds to 4 places; a logit tie broken the other way by another summation order
    # would move one example (0.0001).
    assert abs(accuracy - result["test_accuracy"]) <= 1.5e-4, (accuracy, result["test_accuracy"])
    # The arrays own their memory: they outlive the Checkpoint.
    kernel = ckpt.variables["dense0/kernel"]
    del ckpt, w0, b0, w1, b1
    assert np.isfinite(kernel).all() and kernel.std() > 0


def test_inspect_agrees_with_the_arrays(job):
    root, _ = job
    ckpt = pstrain.load_checkpoint(root)
    r = subprocess.run([BINARY, "checkpoint", "inspect", str(root), "--json"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["path"] == ckpt.path and summary["global_step"] == ckpt.global_step
    assert [(v["name"], tuple(v["shape"])) for v in summary["variables"]] == [
        (name, a.shape) for name, a in ckpt.variables.items()]
    assert summary["ledger"]["applied"] == summary["ledger"]["tasks"] > 0


def test_a_damaged_or_missing_checkpoint_names_the_file(job, tmp_path):
    root, result = job
    ckpt = pstrain.load_checkpoint(root)
    copy = tmp_path / os.path.basename(ckpt.path)
    copy.mkdir()
    for name in os.listdir(ckpt.path):
        (copy / name).write_bytes(open(os.path.join(ckpt.path, name), "rb").read())
    part = copy / "ps-1.ckpt"
    data = bytearray(part.read_bytes())
    data[len(data) // 2] ^= 0x10
    part.write_bytes(bytes(data))
    with pytest.raises(pstrain.DataLossError, match=str(part) + ": checksum mismatch"):
        pstrain.load_checkpoint(copy)
    part.write_bytes(bytes(data[:-9]))
    with pytest.raises(pstrain.DataLossError, match=str(part) + ": truncated"):
        pstrain.load_checkpoint(copy)
    with pytest.raises(pstrain.NotFoundError, match="no such file or directory"):
        pstrain.load_checkpoint(tmp_path / "nothing-here")
    (tmp_path / "empty").mkdir()
    with pytest.raises(pstrain.NotFoundError, match="no valid checkpoint"):
        pstrain.load_checkpoint(tmp_path / "empty")  # a directory without checkpoints


def test_a_plain_torch_module_filled_from_it_gives_the_jobs_accuracy(job):
    import torch
    import pstrain.torch as pt
    root, result = job

    class Mlp(torch.nn.Module):
        """The built-in MLP as a plain module, its parameters named as the job's variables."""

        def __init__(self, hidden=32):
            super().__init__()
            for name, shape in [("dense0/kernel", (784, hidden)), ("dense0/bias", (hidden,)),
                                ("dense1/kernel", (hidden, 10)), ("dense1/bias", (10,))]:
                self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape)))

        def forward(self, x):
            p = dict(self.named_parameters())
            h = torch.relu(x @ p["dense0/kernel"] + p["dense0/bias"])
            return h @ p["dense1/kernel"] + p["dense1/bias"]

    model = Mlp()
    assert pt.load_state_dict(model, root) == []
    x = torch.from_numpy(read_idx("t10k-images-idx3-ubyte").reshape(-1, 784).astype(np.float32))
    y = torch.from_numpy(read_idx("t10k-labels-idx1-ubyte").astype(np.int64))
    with torch.no_grad():
        accuracy = float((model(x / 255).argmax(1) == y).double().mean())
    assert abs(accuracy - result["test_accuracy"]) <= 1.5e-4, (accuracy, result["test_accuracy"])

    # Another shape is refused before anything changes; a missing parameter unless not strict.
    wide = Mlp(hidden=64)
    with pytest.raises(pstrain.InvalidArgumentError,
                       match=r"dense0/kernel has shape \(784, 64\), the checkpoint's variable "
                             r"\(784, 32\)"):
        pt.load_state_dict(wide, root)
    assert all(float(p.abs().sum()) == 0 for p in wide.parameters())
    extra = Mlp()
    extra.register_parameter("head", torch.nn.Parameter(torch.ones(3)))
    with pytest.raises(pstrain.InvalidArgumentError, match="no variable for the parameters head"):
        pt.load_state_dict(extra, pstrain.load_checkpoint(root))
    assert pt.load_state_dict(extra, root, strict=False) == []
    assert float(extra.head.sum()) == 3
    smaller = torch.nn.Module()
    smaller.register_parameter("dense1/bias", torch.nn.Parameter(torch.zeros(10)))
    assert pt.load_state_dict(smaller, root) == ["dense0/kernel", "dense0/bias", "dense1/kernel"]
