"""MNIST with a PyTorch CNN whose parameters live on pstrain's parameter servers.

Run it as every worker of a local cluster (the chief in `--model external` mode):

    pstrain launch --ps 2 --workers 2 -- python3 examples/python/mnist_torch.py

Each worker reads the IDX files (`--data`, default: the repository's data/mnist), takes every
num_workers-th batch of each epoch's shuffled order (the same order on every worker, so the
shards are disjoint), or, when the chief hands out tasks, the batches of each task it is given:

    pstrain launch --ps 2 --workers 2 --rows 60000 --epochs 3 -- \
        python3 examples/python/mnist_torch.py --epochs 3

(the chief cuts rows [0, 60000) into tasks; a worker that dies is started again and its task
redone, each batch applied once; pass the chief's --epochs to the script too, so that its cosine
spans the job). Per step it pulls the parameters, runs forward and backward in PyTorch and
pushes the gradients; the PS apply the optimizer (`--optimizer adam|sgd`, `--lr`, decayed along
a cosine over the job's updates unless `--schedule constant`). At the end
the workers meet at a barrier and worker 0 evaluates the final parameters on the 10k test images
and prints one JSON line with `test_accuracy`.

`--local` trains the same model in this process alone with torch.optim and the whole training
set (the baseline of bench/python_bench.py); it needs no cluster and no pstrain.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data",
                            "mnist")


class Net(nn.Module):
    """conv 5x5 16 -> pool 2 -> conv 5x5 32 -> pool 2 -> fc 128 -> fc 10 (28x28 inputs).

    Small enough to train three epochs on two shared CPU cores in a few minutes; it reaches
    about 99% test accuracy.
    """

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.fc1 = nn.Linear(32 * 4 * 4, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def read_idx(path):
    """An IDX file (MNIST's format) as a numpy array of its dims, uint8."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    ndim = data[3]
    dims = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    body = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim)
    if body.size != int(np.prod(dims)):
        raise ValueError("%s: %d bytes of data for dims %s" % (path, body.size, dims))
    return body.reshape(dims)


def load_split(data_dir, split):
    """(images float32 [n, 1, 28, 28] scaled to [0, 1], labels int64 [n]) of 'train' or 't10k'."""
    images = read_idx(os.path.join(data_dir, "%s-images-idx3-ubyte" % split))
    labels = read_idx(os.path.join(data_dir, "%s-labels-idx1-ubyte" % split))
    if images.shape[0] != labels.shape[0]:
        raise ValueError("%s: %d images but %d labels" % (split, images.shape[0],
                                                          labels.shape[0]))
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def shard_batches(n, batch, epoch, seed, task, num_tasks):
    """Index arrays of this task's batches in one epoch: every num_tasks-th batch of a shuffled
    order that every task draws alike (so the shards are disjoint and cover the set)."""
    order = np.random.RandomState(seed + epoch).permutation(n)
    starts = range(task * batch, n - batch + 1, num_tasks * batch)
    return [torch.from_numpy(order[s:s + batch]) for s in starts]


def accuracy(model, x, y):
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1000]).argmax(1) == y[i:i + 1000]).sum())
                      for i in range(0, len(y), 1000))
    model.train()
    return correct / len(y)


def train(args, data, model, step_fn, task, num_tasks):
    """Runs the epochs over data = (x, y); step_fn(x, y) does one step and returns the loss.
    (steps, examples, seconds of the steps)."""
    x, y = data
    steps = examples = 0
    start = time.monotonic()
    for epoch in range(args.epochs):
        for idx in shard_batches(len(y), args.batch, epoch, args.seed, task, num_tasks):
            if args.max_steps and steps >= args.max_steps:
                return steps, examples, time.monotonic() - start
            loss = step_fn(x[idx], y[idx])
            steps += 1
            examples += len(idx)
            if args.log_every and steps % args.log_every == 0:
                print("task %d epoch %d step %d loss %.4f" % (task, epoch + 1, steps, loss),
                      file=sys.stderr, flush=True)
    return steps, examples, time.monotonic() - start


def train_on_tasks(args, data, step_fn, client):
    """As train, on the tasks the chief hands out: each batch is rows of data the task names."""
    x, y = data
    steps = examples = 0
    start = time.monotonic()
    for task in client.tasks(args.batch):
        for rows in task.batches():
            idx = torch.from_numpy(rows)
            loss = step_fn(x[idx], y[idx])
            steps += 1
            examples += len(idx)
            if args.log_every and steps % args.log_every == 0:
                print("task %d epoch %d step %d loss %.4f" % (client.task, task.epoch + 1, steps,
                                                              loss), file=sys.stderr, flush=True)
    return steps, examples, time.monotonic() - start


def total_updates(args, n, num_tasks):
    """The updates of every variable over the job (the pushes of all tasks, as shard_batches
    deals n examples): the cosine schedule's length."""
    total = 0
    for task in range(num_tasks):
        steps = args.epochs * len(range(task * args.batch, n - args.batch + 1,
                                        num_tasks * args.batch))
        total += min(steps, args.max_steps) if args.max_steps else steps
    return max(total, 1)


def run_local(args, data, model):
    opt = (torch.optim.Adam(model.parameters(), lr=args.lr) if args.optimizer == "adam"
           else torch.optim.SGD(model.parameters(), lr=args.lr))
    sched = None
    if args.schedule == "cosine":
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt,
                                                           total_updates(args, len(data[1]), 1))

    def step(xb, yb):
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        return loss.item()

    return train(args, data, model, step, 0, 1)


def run_distributed(args, data, model):
    import pstrain
    import pstrain.torch

    with pstrain.Client.connect() as client:
        num_workers = client.num_workers
        schedule = (pstrain.optim.CosineLR(total_updates(args, len(data[1]), num_workers))
                    if args.schedule == "cosine" else None)
        opt = (pstrain.optim.Adam(lr=args.lr, schedule=schedule) if args.optimizer == "adam"
               else pstrain.optim.SGD(lr=args.lr, schedule=schedule))
        ps_model = pstrain.torch.distribute(model, client, optimizer=opt)

        def step(xb, yb):
            ps_model.pull()
            model.zero_grad(set_to_none=False)
            loss = F.cross_entropy(model(xb), yb)
            loss.backward()
            value = loss.item()
            ps_model.push(examples=len(yb), loss=value)
            return value

        if client.has_tasks:
            steps, examples, seconds = train_on_tasks(args, data, step, client)
        else:
            steps, examples, seconds = train(args, data, model, step, client.task, num_workers)
        client.barrier("mnist_torch/trained")
        ps_model.pull()  # the final parameters, the same on every worker after the barrier
        return steps, examples, seconds, client.task, client.mode, client.global_step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=DEFAULT_DATA, help="MNIST IDX directory")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam")
    p.add_argument("--schedule", choices=("cosine", "constant"), default="cosine",
                   help="lr decayed to 0 along a cosine over the job's updates, or constant")
    p.add_argument("--seed", type=int, default=1, help="model init (--local) and data order")
    p.add_argument("--max_steps", type=int, default=0, help="stop after this many steps (0: all)")
    p.add_argument("--log_every", type=int, default=0, help="print the loss every N steps")
    p.add_argument("--local", action="store_true", help="train here with torch.optim, no PS")
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch < 1 or args.lr <= 0:
        p.error("--epochs and --batch must be >= 1 and --lr > 0")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = Net()
    data = load_split(args.data, "train")
    if args.local:
        steps, examples, seconds = run_local(args, data, model)
        task, mode, global_step = 0, "local", steps
    else:
        steps, examples, seconds, task, mode, global_step = run_distributed(args, data, model)
    if task != 0:
        return 0
    x, y = load_split(args.data, "t10k")
    print(json.dumps({"test_accuracy": round(accuracy(model, x, y), 4), "mode": mode,
                      "steps": steps, "examples": examples, "global_step": global_step,
                      "train_seconds": round(seconds, 2),
                      "examples_per_sec": round(examples / max(seconds, 1e-9), 1)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
