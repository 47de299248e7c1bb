"""Linear regression in numpy, its parameters on pstrain's parameter servers.

Runs as one worker task of a pstrain cluster, which it finds in TF_CONFIG:

    pstrain launch --ps 2 --workers 2 --mode sync -- python3 examples/python/linear_numpy.py

or started by hand as each worker (TF_CONFIG with "task": {"type": "worker", "index": i}) next to
a chief run with `pstrain server --job chief --model external` and the PS tasks.

Every worker draws its own examples of y = X w* + b* + noise (w* and b* are the same on every
worker: w* from --truth_seed, b* = 0.5), computes the gradient of the mean squared error by hand
and pushes it; the parameter servers apply SGD. At the end the workers meet at a barrier, pull the
trained model and each prints one JSON line:

    {"task": 0, "mode": "sync", "steps": 200, "global_step": 200, "mse": ..., "w_error": ...,
     "b_error": ..., "w": [...], "b": ...}

w_error is the L2 distance of the trained w from w*; with the default noise (0.01) both errors end
below 0.02. On an error the script says so on stderr, tells the job (so the chief ends it rather
than waiting), and exits 1.
"""

import argparse
import json
import sys

import numpy as np

import pstrain

B_STAR = 0.5


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=200, help="pushes of this worker")
    p.add_argument("--batch", type=int, default=32, help="examples per step")
    p.add_argument("--examples", type=int, default=2000, help="examples this worker draws")
    p.add_argument("--dim", type=int, default=10, help="features")
    p.add_argument("--lr", type=float, default=0.1, help="SGD learning rate on the PS")
    p.add_argument("--noise", type=float, default=0.01, help="standard deviation of y's noise")
    p.add_argument("--truth_seed", type=int, default=7, help="seed of w*")
    p.add_argument("--timeout", type=float, default=60, help="seconds to wait for the chief")
    args = p.parse_args(argv)
    for name in ("steps", "batch", "examples", "dim"):
        if getattr(args, name) < 1:
            p.error("--%s must be positive" % name)
    return args


def true_weights(dim, seed):
    """w*: the same on every worker."""
    return np.random.default_rng(seed).standard_normal(dim)


def train(client, args):
    """Trains w [dim, 1] and b [1] on this worker's examples; the job's model, as pulled after
    every worker has finished, and this worker's result line."""
    rng = np.random.default_rng(1000 + client.task)
    w_star = true_weights(args.dim, args.truth_seed)
    x = rng.standard_normal((args.examples, args.dim))
    y = x @ w_star + B_STAR + args.noise * rng.standard_normal(args.examples)

    sgd = pstrain.optim.SGD(lr=args.lr)
    wi = client.create_variable("w", (args.dim, 1), initializer=pstrain.init.GlorotUniform(seed=1),
                                optimizer=sgd)
    bi = client.create_variable("b", (1,), initializer=pstrain.init.Zeros(), optimizer=sgd)
    grads = [None, None]
    for _ in range(args.steps):
        batch = rng.integers(0, args.examples, args.batch)
        xb, yb = x[batch], y[batch]
        values = client.pull()  # float32 views, valid until the next pull
        # Loss 0.5 * mean(err^2), err = x w + b - y: dw = x^T err / n, db = mean(err).
        err = xb @ values[wi][:, 0] + values[bi][0] - yb
        grads[wi] = (xb.T @ err / args.batch).astype(np.float32).reshape(args.dim, 1)
        grads[bi] = np.array([err.mean()], dtype=np.float32)
        client.push(grads, examples=args.batch, loss=0.5 * float(err @ err) / args.batch)

    client.barrier("trained")
    values = client.pull()
    w = values[wi][:, 0].astype(np.float64)
    b = float(values[bi][0])
    return {"task": client.task, "mode": client.mode, "steps": args.steps,
            "global_step": client.global_step,
            "mse": float(np.mean((x @ w + b - y) ** 2)),
            "w_error": float(np.linalg.norm(w - w_star)), "b_error": abs(b - B_STAR),
            "w": w.tolist(), "b": b}


def main(argv):
    args = parse_args(argv)
    try:
        # On leaving the block the client reports done, or the error that ended it.
        with pstrain.Client.connect(timeout=args.timeout) as client:
            result = train(client, args)
    except pstrain.Error as e:
        print("linear_numpy.py: error: %s" % e, file=sys.stderr)
        return 1
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
