#!/usr/bin/python3
"""Reference runs of torch.optim for tests/ps_torch_optim_test.cc.

Usage: torch_optim_reference.py IN OUT CONFIG_JSON

IN holds "n steps", then a line of n initial weights, then `steps` lines of n gradients.
CONFIG_JSON is a pstrain OptimizerConfig in proto3 JSON with the proto field names (unset fields
absent, int64 values possibly as strings). The script applies the matching torch.optim optimizer
in float32 (weight_decay 0, single-tensor implementation), with torch.nn.utils.clip_grad_norm_
before each step when clip_norm > 0, StepLR for a "step" schedule and the lr set by hand for a
"cosine" one, and writes to OUT, after each step k (0-based), one line per tensor:
    k weights v1 ... vn
    k SLOT v1 ... vn        (each tensor in the optimizer state: momentum_buffer, sum, ...)

Exit status: 0 on success, 3 when torch cannot be imported, 2 for a config it cannot mirror.
"""

import json
import math
import sys

try:
    import torch
except ImportError as e:  # the C++ test turns this into a failure naming python3-torch
    print(f"python3-torch is missing: {sys.executable} cannot import torch ({e})", file=sys.stderr)
    sys.exit(3)


def make_optimizer(params, cfg):
    name = cfg.get("name", "")
    lr = float(cfg["learning_rate"])
    momentum = float(cfg.get("momentum", 0.0))
    kwargs = {"lr": lr}
    if "epsilon" in cfg:
        kwargs["eps"] = float(cfg["epsilon"])
    if name == "sgd":
        kwargs.pop("eps", None)
        return torch.optim.SGD(params, foreach=False, **kwargs)
    if name == "momentum":
        kwargs.pop("eps", None)
        return torch.optim.SGD(params, momentum=momentum, nesterov=bool(cfg.get("nesterov", False)),
                               foreach=False, **kwargs)
    if name == "adagrad":
        return torch.optim.Adagrad(
            params, initial_accumulator_value=float(cfg.get("initial_accumulator_value", 0.0)),
            foreach=False, **kwargs)
    if name == "adam":
        kwargs["betas"] = (float(cfg.get("beta1", 0.9)), float(cfg.get("beta2", 0.999)))
        return torch.optim.Adam(params, foreach=False, **kwargs)
    if name == "rmsprop":
        if "rho" in cfg:
            kwargs["alpha"] = float(cfg["rho"])
        return torch.optim.RMSprop(params, momentum=momentum, foreach=False, **kwargs)
    print(f"no torch.optim counterpart for optimizer '{name}'", file=sys.stderr)
    sys.exit(2)


def cosine_lr(cfg, step):
    """pstrain's ScheduledLearningRate for a cosine schedule (see src/ps/optimizer.h)."""
    lr = float(cfg["learning_rate"])
    s = cfg["schedule"]
    warmup = int(s.get("warmup_steps", 0))
    total = int(s["total_steps"])
    min_lr = float(s.get("min_lr", 0.0))
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / (total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))


def main():
    in_path, out_path, cfg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    with open(in_path) as f:
        lines = [line.split() for line in f if line.strip()]
    n, steps = int(lines[0][0]), int(lines[0][1])
    weights = [float(x) for x in lines[1]]
    grads = [[float(x) for x in line] for line in lines[2:2 + steps]]
    assert len(weights) == n and len(grads) == steps and all(len(g) == n for g in grads)

    param = torch.tensor(weights, dtype=torch.float32, requires_grad=True)
    opt = make_optimizer([param], cfg)
    schedule = cfg.get("schedule", {})
    kind = schedule.get("kind", "")
    scheduler = None
    if kind == "step":
        scheduler = torch.optim.lr_scheduler.StepLR(
            opt, step_size=int(schedule["step_size"]), gamma=float(schedule["decay_rate"]))
    elif kind not in ("", "constant", "cosine"):
        print(f"unknown schedule kind '{kind}'", file=sys.stderr)
        sys.exit(2)
    clip_norm = float(cfg.get("clip_norm", 0.0))

    out = []
    for k, g in enumerate(grads):
        param.grad = torch.tensor(g, dtype=torch.float32)
        if clip_norm > 0:
            torch.nn.utils.clip_grad_norm_([param], clip_norm)
        if kind == "cosine":
            for group in opt.param_groups:
                group["lr"] = cosine_lr(cfg, k)
        opt.step()
        if scheduler is not None:
            scheduler.step()
        rows = [("weights", param.detach())]
        for slot, value in sorted(opt.state[param].items()):
            if torch.is_tensor(value) and value.numel() == n and slot != "step":
                rows.append((slot, value))
        for slot, value in rows:
            out.append(" ".join([str(k), slot] + [repr(float(x)) for x in value.tolist()]))
    with open(out_path, "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
