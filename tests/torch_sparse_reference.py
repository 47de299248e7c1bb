#!/usr/bin/python3
"""Reference runs of torch's sparse optimizers for tests/ps_sparse_torch_test.cc.

Usage: torch_sparse_reference.py IN OUT CONFIG_JSON

IN holds "rows dim steps", then a line of rows*dim initial weights (row-major), then per step a
line "k i1 ... ik" of distinct row indices followed by a line of k*dim gradient values (row j of
the step's gradient belongs to index ij). CONFIG_JSON is a pstrain OptimizerConfig in proto3 JSON
with the proto field names: "adagrad" runs torch.optim.Adagrad, "adam" torch.optim.SparseAdam.

Each step runs nn.Embedding(rows, dim, sparse=True) in float32 on the step's indices, backpropagates
sum(embedding(indices) * gradient), so the weight's gradient is a sparse tensor holding exactly the
step's gradient rows, and steps the optimizer. After each step k (0-based) it writes to OUT one
line per tensor, each rows*dim values:
    k weights v1 ... v(rows*dim)
    k SLOT v1 ...           (sum; or exp_avg and exp_avg_sq)

Exit status: 0 on success, 3 when torch cannot be imported, 2 for a config it cannot mirror.
"""

import json
import sys

try:
    import torch
except ImportError as e:  # the C++ test turns this into a failure naming python3-torch
    print(f"python3-torch is missing: {sys.executable} cannot import torch ({e})", file=sys.stderr)
    sys.exit(3)


def make_optimizer(params, cfg):
    name = cfg.get("name", "")
    kwargs = {"lr": float(cfg["learning_rate"])}
    if "epsilon" in cfg:
        kwargs["eps"] = float(cfg["epsilon"])
    if name == "adagrad":
        return torch.optim.Adagrad(
            params, initial_accumulator_value=float(cfg.get("initial_accumulator_value", 0.0)),
            **kwargs)
    if name == "adam":
        kwargs["betas"] = (float(cfg.get("beta1", 0.9)), float(cfg.get("beta2", 0.999)))
        return torch.optim.SparseAdam(params, **kwargs)
    print(f"no sparse torch optimizer for '{name}'", file=sys.stderr)
    sys.exit(2)


def main():
    in_path, out_path, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    if cfg.get("schedule", {}).get("kind", "") not in ("", "constant") or "clip_norm" in cfg:
        print("the sparse reference runs a constant lr without clipping", file=sys.stderr)
        sys.exit(2)
    with open(in_path) as f:
        lines = [line.split() for line in f if line.strip()]
    rows, dim, steps = (int(x) for x in lines[0])
    weights = torch.tensor([float(x) for x in lines[1]], dtype=torch.float32).view(rows, dim)
    assert len(lines) == 2 + 2 * steps

    emb = torch.nn.Embedding(rows, dim, sparse=True)
    with torch.no_grad():
        emb.weight.copy_(weights)
    opt = make_optimizer(emb.parameters(), cfg)

    out = []
    for k in range(steps):
        header, values = lines[2 + 2 * k], lines[3 + 2 * k]
        indices = torch.tensor([int(x) for x in header[1:]], dtype=torch.long)
        assert len(indices) == int(header[0]) and len(values) == len(indices) * dim
        grad = torch.tensor([float(x) for x in values], dtype=torch.float32).view(-1, dim)
        opt.zero_grad()
        (emb(indices) * grad).sum().backward()
        assert emb.weight.grad.is_sparse
        opt.step()
        tensors = [("weights", emb.weight.detach())]
        for slot, value in sorted(opt.state[emb.weight].items()):
            if torch.is_tensor(value) and value.shape == emb.weight.shape:
                tensors.append((slot, value))
        for slot, value in tensors:
            flat = value.reshape(-1).tolist()
            out.append(" ".join([str(k), slot] + [repr(float(x)) for x in flat]))
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
