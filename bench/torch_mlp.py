"""PyTorch reference for `pstrain bench`: the MNIST MLP 784-256-128-10 trained with SGD
(lr 0.01, batch 256) on one thread, as pstrain's single-process baseline trains it. Prints one
JSON line with examples_per_sec and the loop's cpu_seconds (training steps only; loading is not
timed).

    /usr/bin/python3 bench/torch_mlp.py --data data/mnist [--batch 256] [--max_batches N]
"""
import argparse
import gzip
import json
import os
import sys
import time

# One thread in the BLAS too: torch.set_num_threads(1) sets PyTorch's own thread pool, but the
# OpenBLAS of Debian's libopenblas0-pthread starts a thread per core unless told before it loads
# (measured: 2 CPU-seconds per second of the loop on 2 cores without this).
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402


def read_idx(path):
    """An IDX file of unsigned bytes, raw or gzip-compressed, as a numpy array."""
    for candidate in (path, path + ".gz"):
        if os.path.exists(candidate):
            with open(candidate, "rb") as f:
                raw = f.read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
            ndim = raw[3]
            dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    sys.exit(f"torch_mlp.py: no {path} (or .gz)")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="data/mnist")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--max_batches", type=int, default=1 << 30)
    a = p.parse_args()
    torch.set_num_threads(1)
    x = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte")).copy())
    x = x.reshape(x.shape[0], -1).float() / 255.0
    y = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte")).astype(np.int64))
    torch.manual_seed(7)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    examples = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for b in range(0, x.shape[0] - a.batch + 1, a.batch):
        if b // a.batch >= a.max_batches:
            break
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x[b:b + a.batch]), y[b:b + a.batch])
        loss.backward()
        opt.step()
        examples += a.batch
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    print(json.dumps({"examples_per_sec": examples / seconds, "examples": examples,
                      "cpu_seconds": cpu_seconds,
                      "threads": torch.get_num_threads(), "loss": float(loss)}))


if __name__ == "__main__":
    main()
