"""pstrain.torch against PyTorch itself, on real clusters of the pstrain binary on 127.0.0.1 (PS
and chief in `--model external` mode as processes; the workers are Clients in this process's
threads, each its own task).

- Sync equivalence: 2 workers training examples/python/mnist_torch.py's CNN with batch b and SGD
  on the PS end with the parameters of one torch.optim.SGD run with batch 2b from the same
  initial values (1e-5).
- Embedding (SGD and Adagrad tables, both in one model) against torch.nn.Embedding(sparse=True)
  with torch.optim.SGD / Adagrad (1e-5).
- pull() copies into the parameters' storage; the default initial values are PyTorch's.
- Bad input raises the pstrain exception and leaves the job able to end.
"""

import importlib.util
import os
import sys
import threading

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import pstrain
import pstrain.torch

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import make_cluster  # noqa: E402,F401 (a fixture)

SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(SOURCE_DIR, "data", "mnist")


def load_example():
    path = os.path.join(SOURCE_DIR, "examples", "python", "mnist_torch.py")
    spec = importlib.util.spec_from_file_location("mnist_torch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mnist = load_example()


def run_workers(chief, num_workers, body):
    """body(client) in one thread per worker task, each with its own Client; their results."""
    results, errors = [None] * num_workers, []

    def work(task):
        try:
            with pstrain.Client.connect(chief=chief, task=task, timeout=60) as client:
                results[task] = body(client)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(num_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a worker thread hangs"
    if errors:
        raise errors[0]
    return results


def state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def assert_close(actual, expected, atol=1e-5):
    for name, e in expected.items():
        np.testing.assert_allclose(actual[name].numpy(), e.numpy(), rtol=0, atol=atol,
                                   err_msg=name)


def test_sync_two_workers_equal_one_torch_sgd_run_of_twice_the_batch(make_cluster):
    steps, b, lr = 6, 16, 0.05
    x, y = mnist.load_split(DATA, "train")
    x, y = x[:2 * b * steps], y[:2 * b * steps]

    def worker(client):
        torch.manual_seed(100 + client.task)  # different local init: the PS values must win
        model = mnist.Net()
        ps = pstrain.torch.distribute(model, client, optimizer=pstrain.optim.SGD(lr=lr))
        ps.pull()
        initial = state(model)
        for s in range(steps):
            ps.pull()
            lo = 2 * b * s + b * client.task
            model.zero_grad()
            F.cross_entropy(model(x[lo:lo + b]), y[lo:lo + b]).backward()
            ps.push(examples=b)
        ps.pull()  # sync: waits for the last step
        return initial, state(model), ps.global_step

    torch.set_num_threads(1)
    c = make_cluster(num_ps=2, num_workers=2, chief_flags=["--mode", "sync"])
    (init0, final0, step0), (init1, final1, _) = run_workers(c.chief_address, 2, worker)
    c.finish()
    assert step0 == steps
    assert_close(init1, init0, atol=0)
    assert_close(final1, final0, atol=0)

    reference = mnist.Net()
    reference.load_state_dict(init0)
    opt = torch.optim.SGD(reference.parameters(), lr=lr)
    for s in range(steps):
        opt.zero_grad()
        lo = 2 * b * s
        F.cross_entropy(reference(x[lo:lo + 2 * b]), y[lo:lo + 2 * b]).backward()
        opt.step()
    moved = max(float((final0[k] - init0[k]).abs().max()) for k in init0)
    assert moved > 1e-3, "the parameters did not train"
    expected = state(reference)
    print("sync: parameters moved up to %.3g; max |PS - torch| %.3g" % (
        moved, max(float((final0[k] - expected[k]).abs().max()) for k in expected)))
    assert_close(final0, expected)


def test_default_initial_values_are_pytorchs_and_pull_copies_into_the_storage(make_cluster):
    def worker(client):
        model = mnist.Net()
        ptrs = [p.data_ptr() for p in model.parameters()]
        params = list(model.parameters())
        ps = pstrain.torch.distribute(model, client, optimizer=pstrain.optim.Adam(lr=1e-3))
        ps.pull()
        initial = state(model)
        assert [p.data_ptr() for p in model.parameters()] == ptrs
        assert all(a is b for a, b in zip(model.parameters(), params))
        pulled = [np.array(v) for v in client.pull()]
        for p, v in zip(model.parameters(), pulled):
            np.testing.assert_array_equal(p.detach().numpy(), v.reshape(p.shape))
        model.zero_grad()
        F.cross_entropy(model(torch.rand(4, 1, 28, 28)), torch.tensor([0, 1, 2, 3])).backward()
        model.fc2.bias.grad = None  # sends zeros
        ps.push(examples=4)
        ps.pull()
        assert ps.global_step == 1
        assert [p.data_ptr() for p in model.parameters()] == ptrs
        after = state(model)
        assert torch.equal(after["fc2.bias"], initial["fc2.bias"])  # zeros: Adam's first step is 0
        assert not torch.equal(after["fc2.weight"], initial["fc2.weight"])
        return initial, ps.names

    c = make_cluster(num_ps=1, num_workers=1, chief_flags=["--mode", "async"])
    [(values, names)] = run_workers(c.chief_address, 1, worker)
    c.finish()
    assert names == [n for n, _ in mnist.Net().named_parameters()]
    fan_in = {"conv1": 25, "conv2": 16 * 25, "fc1": 512, "fc2": 128}
    for name, v in values.items():
        bound = 1 / np.sqrt(fan_in[name.split(".")[0]])
        assert float(v.abs().max()) <= bound * 1.01, name
        if v.numel() >= 500:  # a uniform's std, and not all equal
            assert abs(float(v.std()) - bound / np.sqrt(3)) < 0.1 * bound, name


class TwoTables(nn.Module):
    def __init__(self, emb_a, emb_b):
        super().__init__()
        self.a, self.b = emb_a, emb_b

    def forward(self, ids_a, ids_b, w):
        return ((self.a(ids_a).sum(1) * w).sum(1) - (self.b(ids_b) * w).sum(1)).pow(2).mean()


def test_embedding_matches_torch_sparse_embedding_with_sgd_and_adagrad(make_cluster):
    dim, steps, n = 4, 5, 12
    gen = torch.Generator().manual_seed(7)
    batches = [(torch.randint(0, n, (6, 3), generator=gen), torch.randint(0, n, (6,),
                generator=gen), torch.randn(6, dim, generator=gen)) for _ in range(steps)]
    all_ids = torch.arange(n)

    def worker(client):
        init = pstrain.init.Normal(0.0, 1.0, seed=3)
        a = pstrain.torch.Embedding(client, "a", dim, num_embeddings=n, initializer=init,
                                    optimizer=pstrain.optim.SGD(lr=0.1))
        b = pstrain.torch.Embedding(client, "b", dim, num_embeddings=n, initializer=init,
                                    optimizer=pstrain.optim.Adagrad(lr=0.1))
        model = TwoTables(a, b)
        ps = pstrain.torch.distribute(model, client)
        with torch.no_grad():
            initial = (a(all_ids).clone(), b(all_ids).clone())
        for ids_a, ids_b, w in batches:
            ps.pull()
            model(ids_a, ids_b, w).backward()
            ps.push(examples=6)
        with torch.no_grad():
            return initial, (a(all_ids).clone(), b(all_ids).clone())

    c = make_cluster(num_ps=2, num_workers=1, chief_flags=["--mode", "async"])
    [(initial, final)] = run_workers(c.chief_address, 1, worker)
    c.finish()

    ref_a = nn.Embedding(n, dim, sparse=True)
    ref_b = nn.Embedding(n, dim, sparse=True)
    with torch.no_grad():
        ref_a.weight.copy_(initial[0])
        ref_b.weight.copy_(initial[1])
    ref = TwoTables(ref_a, ref_b)
    opts = [torch.optim.SGD(ref_a.parameters(), lr=0.1),
            torch.optim.Adagrad(ref_b.parameters(), lr=0.1)]
    for ids_a, ids_b, w in batches:
        for o in opts:
            o.zero_grad()
        ref(ids_a, ids_b, w).backward()
        for o in opts:
            o.step()
    assert float((final[0] - initial[0]).abs().max()) > 1e-3
    np.testing.assert_allclose(final[0].numpy(), ref_a.weight.detach().numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(final[1].numpy(), ref_b.weight.detach().numpy(), rtol=0, atol=1e-5)


def test_bad_input_raises_the_pstrain_exception(make_cluster):
    def worker(client):
        with pytest.raises(pstrain.InvalidArgumentError, match="fc.weight.*float64"):
            pstrain.torch.distribute(_float64_module(), client)
        with pytest.raises(pstrain.InvalidArgumentError, match="nn.Module"):
            pstrain.torch.distribute(object(), client)
        ps = pstrain.torch.distribute(nn.Linear(3, 2), client,
                                      optimizer=pstrain.optim.SGD(lr=0.1))
        with pytest.raises(pstrain.FailedPreconditionError, match="before pull"):
            ps.push()
        emb = pstrain.torch.Embedding(client, "e", 2, num_embeddings=5)
        with pytest.raises(pstrain.InvalidArgumentError, match="negative"):
            emb(torch.tensor([1, -1]))
        with pytest.raises(pstrain.InvalidArgumentError, match="num_embeddings"):
            emb(torch.tensor([5]))
        with pytest.raises(pstrain.InvalidArgumentError, match="int64"):
            emb(torch.tensor([0.5]))
        ps.pull()
        ps.push()  # still usable after the refusals
        return True

    c = make_cluster(num_ps=1, num_workers=1, chief_flags=["--mode", "async"])
    assert run_workers(c.chief_address, 1, worker) == [True]
    c.finish()


def _float64_module():
    m = nn.Module()
    m.fc = nn.Linear(2, 2).double()
    return m
