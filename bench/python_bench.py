"""The Python layer's cost, measured against C++ and plain PyTorch in the same run.

1. Per-step overhead: ps_model.pull() + ps_model.push() of the MLP's variables (784-256-128-10,
   as `pstrain launch`'s default MLP: 6 variables, 235k floats) from Python, against the same
   Pull + Push from C++ (bench/client_loop), against one cluster of the pstrain binary (1 PS,
   async), in interleaved repetitions (Python, C++ with the copy into its own parameter buffers
   that pull() makes, bare C++ Pull + Push), each timing one worker stepping alone; medians.
2. Training throughput: examples/s of examples/python/mnist_torch.py on pstrain (1 PS, 1 worker,
   async) against the same script with --local (torch.optim in one process), interleaved.

Prints a table and writes it as the "python_bench results" section of bench/results.md.

    python3 bench/python_bench.py --build build
"""

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.dirname(HERE)
SCRIPT = os.path.join(SOURCE_DIR, "examples", "python", "mnist_torch.py")
SECTION = "# python_bench results"


def mlp():
    from torch import nn
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def overhead(client_loop, steps, reps):
    """Median seconds per step: {'python': ..., 'cpp_copy': ..., 'cpp': ...}."""
    import torch
    import pstrain
    import pstrain.torch
    model = mlp()
    specs = ["%s:%s" % (n, "x".join(str(d) for d in p.shape)) for n, p in model.named_parameters()]
    times = {"python": [], "cpp_copy": [], "cpp": []}
    with cluster(num_workers=2) as c:
        cpp = subprocess.Popen([client_loop] + specs, env=c.env("worker", 1),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            with c.connect(task=0) as client:
                ps = pstrain.torch.distribute(model, client, optimizer=pstrain.optim.SGD(lr=1e-6))
                ps.pull()
                model(torch.rand(64, 784)).square().mean().backward()

                def python_steps():
                    start = time.perf_counter()
                    for _ in range(steps):
                        ps.pull()
                        ps.push(examples=64)
                    return (time.perf_counter() - start) / steps

                def cpp_steps(copy):
                    cpp.stdin.write("run %d %d\n" % (steps, copy))
                    cpp.stdin.flush()
                    answer = cpp.stdout.readline().split()
                    if len(answer) != 2 or answer[0] != "ns_per_step":
                        raise RuntimeError("client_loop answered %r" % answer)
                    return float(answer[1]) * 1e-9

                python_steps(), cpp_steps(1)  # warm-up
                for _ in range(reps):
                    times["python"].append(python_steps())
                    times["cpp_copy"].append(cpp_steps(1))
                    times["cpp"].append(cpp_steps(0))
            cpp.stdin.write("done\n")
            cpp.stdin.flush()
            if cpp.wait(timeout=60) != 0:
                raise RuntimeError("client_loop exited %d" % cpp.returncode)
        finally:
            if cpp.poll() is None:
                cpp.kill()
                cpp.wait()
    return {k: statistics.median(v) for k, v in times.items()}, times


@contextlib.contextmanager
def cluster(num_workers):
    """1 PS and an async chief (tests/pstrain_pytest_cluster.py); every process is killed on
    leaving the block."""
    from pstrain_pytest_cluster import Cluster
    with tempfile.TemporaryDirectory() as logs:
        c = Cluster(logs, num_ps=1, num_workers=num_workers,
                    binary=os.environ["PSTRAIN_BINARY"]).start({"mode": "async"})
        try:
            yield c
            c.finish()
        finally:
            c.kill_all()


def mnist_run(local, steps):
    """examples/s of one run of the example (training loop only)."""
    argv = ["/usr/bin/python3", SCRIPT, "--epochs", "1", "--max_steps", str(steps)]
    if local:
        out = subprocess.run(argv + ["--local"], capture_output=True, text=True, check=True,
                             timeout=900).stdout
    else:
        with cluster(num_workers=1) as c:
            out = subprocess.run(argv, env=c.env("worker", 0), capture_output=True, text=True,
                                 check=True, timeout=900).stdout
    return json.loads(out.strip().splitlines()[-1])["examples_per_sec"]


def throughput(steps, reps):
    runs = {"pstrain": [], "local": []}
    for _ in range(reps):
        runs["pstrain"].append(mnist_run(False, steps))
        runs["local"].append(mnist_run(True, steps))
    return {k: statistics.median(v) for k, v in runs.items()}, runs


def revision():
    try:
        return subprocess.run(["git", "-C", SOURCE_DIR, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def paired(runs, key, base):
    """Median over the repetitions of runs[key][i] / runs[base][i]: each ratio is of two
    measurements taken back to back, so a load that changes between repetitions cancels."""
    return statistics.median(a / b for a, b in zip(runs[key], runs[base]))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def report(ov, ov_runs, tp, tp_runs, args):
    us = lambda s: "%.0f µs" % (s * 1e6)  # noqa: E731
    cv = lambda v: "%.0f%%" % (100 * statistics.pstdev(v) / statistics.mean(v))  # noqa: E731
    lines = [
        SECTION, "",
        "- date: %s; revision: %s" % (datetime.datetime.now(datetime.timezone.utc)
                                      .isoformat(timespec="seconds"), revision()),
        "- machine: %d CPUs (%s); load average at start %s" % (
            os.cpu_count(), cpu_name(), ", ".join("%.2f" % x for x in os.getloadavg())),
        "- overhead: %d interleaved repetitions of %d steps each; cluster of 1 PS (async), one "
        "worker stepping at a time; the MLP 784-256-128-10 (6 variables, 235k floats pulled and "
        "pushed per step). Ratio: the median over the repetitions of the ratio of two "
        "back-to-back measurements (a shared machine's load cancels in it)" % (args.reps,
                                                                              args.steps),
        "", "| one step of pull + push | median time | CV | ratio to C++ with the copy "
        "| ratio to bare C++ |", "|---|---:|---:|---:|---:|",
    ]
    names = {"python": "Python: ps_model.pull() + ps_model.push()",
             "cpp_copy": "C++: Pull, copy into own buffers, Push (the same work)",
             "cpp": "C++: Pull + Push (no copy)"}
    for k in ("python", "cpp_copy", "cpp"):
        lines.append("| %s | %s | %s | %.2fx | %.2fx |" % (
            names[k], us(ov[k]), cv(ov_runs[k]), paired(ov_runs, k, "cpp_copy"),
            paired(ov_runs, k, "cpp")))
    lines += [
        "", "Target: Python at most 1.2x the C++ calls.", "",
        "- throughput: examples/python/mnist_torch.py, batch 64, %d steps of the training loop "
        "(after loading the data and connecting), %d interleaved runs of each, medians; "
        "torch.set_num_threads(1); ratio as above, of back-to-back runs" % (args.mnist_steps,
                                                                           args.mnist_reps),
        "", "| MNIST CNN training | examples/s | runs | examples/s ratio to --local |",
        "|---|---:|---|---:|",
        "| on pstrain (1 PS, 1 worker, async, Adam on the PS) | %.0f | %s | %.2fx |" % (
            tp["pstrain"], ", ".join("%.0f" % x for x in tp_runs["pstrain"]),
            paired(tp_runs, "pstrain", "local")),
        "| --local (torch.optim.Adam, no PS) | %.0f | %s | 1.00x |" % (
            tp["local"], ", ".join("%.0f" % x for x in tp_runs["local"])),
        "",
        "Each step on pstrain adds a pull and a push of the CNN's 80k floats over gRPC on "
        "127.0.0.1, and runs Adam in the PS process instead of the training process.",
        "",
    ]
    return "\n".join(lines)


def write_section(path, text):
    old = open(path).read() if os.path.exists(path) else ""
    at = old.find(SECTION)
    if at >= 0:
        end = old.find("\n# ", at + len(SECTION))
        old = old[:at] + (old[end + 1:] if end >= 0 else "")
    with open(path, "w") as f:
        f.write(old.rstrip("\n") + "\n\n" + text if old.strip() else text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(SOURCE_DIR, "build"), help="build directory")
    p.add_argument("--steps", type=int, default=40, help="steps per overhead repetition")
    p.add_argument("--reps", type=int, default=25, help="overhead repetitions")
    p.add_argument("--mnist_steps", type=int, default=200, help="steps per MNIST run")
    p.add_argument("--mnist_reps", type=int, default=5, help="MNIST runs of each kind")
    p.add_argument("--results", default=os.path.join(HERE, "results.md"))
    args = p.parse_args()
    build = os.path.abspath(args.build)
    sys.path[:0] = [os.path.join(build, "python"), os.path.join(SOURCE_DIR, "tests")]
    os.environ.setdefault("PSTRAIN_BINARY", os.path.join(build, "pstrain"))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(build, "python")] + [x for x in [os.environ.get("PYTHONPATH")] if x])
    import torch
    torch.set_num_threads(1)
    ov, ov_runs = overhead(os.path.join(build, "bench", "client_loop"), args.steps, args.reps)
    tp, tp_runs = throughput(args.mnist_steps, args.mnist_reps)
    text = report(ov, ov_runs, tp, tp_runs, args)
    print(text)
    write_section(args.results, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
