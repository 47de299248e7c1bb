#!/usr/bin/env python3
"""Seeded fault injection: `pstrain launch` jobs (2 PS + 2 workers, MNIST) that each lose one
process to SIGKILL at a random moment of training, and must finish by themselves as well as a
fault-free run.

First one fault-free run per mode gives the reference accuracy of that mode. Then every run kills
one process of a role (worker, ps or chief; the task index at random) when the job's global step
reaches a random fraction (5% to 75%) of its steps, and checks: launch exits 0 by itself within
the deadline, the final JSON's test_accuracy is within --tolerance of the reference of its mode,
tasks_applied_once is true and failures_survived is at least 1. The chief logs its progress
about every half second, so on a fast machine the first line past the fraction may be the last
step's: such a kill falls after training (checkpointed, evaluating, stopping the tasks), and a
task that is no longer needed may die without the job having anything to survive, so there
failures_survived may be 0 (the table's kill time then says "after training"); so may a chief
killed before the first checkpoint, which starts the job again from scratch. Run k uses the
seed --seed + k for its choices (role, mode, task, moment); the job's own training seed is the
same in every run.

  fault_kills.py --pstrain BIN --data DIR [--runs N] [--seed S] [--cases all|random]
                 [--modes async,sync] [--roles worker,ps,chief] [--program mnist_torch]

--program mnist_torch runs the jobs of a client program instead: `pstrain launch --rows 60000
--epochs 1 -- python3 examples/python/mnist_torch.py` (the PyTorch CNN on the chief's tasks),
whose worker:0 prints the test accuracy; a worker kill is of the program's Python process.

--cases all runs every role in every mode once, then N random runs; --cases random only the N
random runs. A summary table is printed; the exit status is 1 if any run failed.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# A fast job (a few seconds of training) whose accuracy varies little between fault-free runs.
JOB = ["--ps", "2", "--workers", "2", "--epochs", "3", "--batch", "256", "--hidden", "64",
       "--lr", "0.002", "--seed", "1", "--checkpoint_every_secs", "1"]
ROLES = ("worker", "ps", "chief")
MODES = ("async", "sync", "ssp")
TASKS = {"worker": 2, "ps": 2, "chief": 1}
PROGRESS = re.compile(r"^progress epoch \d+/\d+ step (\d+)/(\d+)", re.M)
# The client program's job: its steps (938: 18 tasks of 50 batches of 64 rows and one of 38)
# are the pushes of both workers, which the chief's progress lines count (in sync mode the
# steps, each of both workers' gradients: half as many).
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples", "python",
                      "mnist_torch.py")
PROGRAM_JOB = ["--ps", "2", "--workers", "2", "--rows", "60000", "--epochs", "1", "--task_rows",
               "3200", "--checkpoint_every_secs", "1", "--heartbeat_timeout_secs", "2"]
PROGRAM_STEPS = 938
PROGRAM_PROGRESS = re.compile(r"^progress step (\d+) ", re.M)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pstrain", required=True, help="the pstrain binary")
    p.add_argument("--data", required=True, help="the MNIST directory")
    p.add_argument("--runs", type=int, default=10, help="random runs (default 10)")
    p.add_argument("--seed", type=int, default=1, help="run k uses seed + k (default 1)")
    p.add_argument("--cases", choices=("all", "random"), default="random",
                   help="all: every role x mode once before the random runs")
    p.add_argument("--modes", default="async,sync", help="comma separated (default async,sync)")
    p.add_argument("--roles", default="worker,ps,chief", help="comma separated")
    p.add_argument("--tolerance", type=float, default=0.005,
                   help="allowed |accuracy - reference| (default 0.005)")
    p.add_argument("--reference_runs", type=int, default=1,
                   help="fault-free runs per mode; the reference is their median, their spread is "
                        "printed (default 1)")
    p.add_argument("--deadline", type=float, default=180,
                   help="seconds a run may take before it counts as hung (default 180)")
    p.add_argument("--job_flag", action="append", default=[],
                   help="one more flag for the job (repeat it), e.g. --job_flag=--task_rows=3840")
    p.add_argument("--keep", action="store_true", help="keep the runs' log directories")
    p.add_argument("--program", choices=("builtin", "mnist_torch"), default="builtin",
                   help="the built-in MLP (default), or examples/python/mnist_torch.py on tasks")
    a = p.parse_args(argv)
    a.modes = [m for m in a.modes.split(",") if m]
    a.roles = [r for r in a.roles.split(",") if r]
    for name, given, known in (("--modes", a.modes, MODES), ("--roles", a.roles, ROLES)):
        bad = [x for x in given if x not in known]
        if bad or not given:
            p.error("%s: %s is not one of %s" % (name, ",".join(bad) or "nothing",
                                                 ",".join(known)))
    if a.runs < 0:
        p.error("--runs must be at least 0")
    if not os.access(a.pstrain, os.X_OK):
        p.error("--pstrain %s is not an executable file" % a.pstrain)
    if not os.path.isdir(a.data):
        p.error("--data %s is not a directory" % a.data)
    return a


def result_line(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def progress(chief_log, program=None):
    """The fraction of the job's steps done, by the last progress line in the chief's log."""
    try:
        with open(chief_log, errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    if program:  # the job's mode
        steps = PROGRAM_PROGRESS.findall(text)
        total = PROGRAM_STEPS // 2 if program == "sync" else PROGRAM_STEPS
        return int(steps[-1]) / total if steps else None
    steps = PROGRESS.findall(text)
    return int(steps[-1][0]) / max(1, int(steps[-1][1])) if steps else None


def children(launcher):
    """(pid, argv) of every process whose parent is `launcher`."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != launcher:
                continue
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except (OSError, ValueError, IndexError):
            continue
        yield int(entry), args


def task_pid(launcher, role, index):
    """The pid of `pstrain server --job role --task index` started by `launcher`, or None."""
    want = ["server", "--job", role, "--task", str(index)]
    return next((pid for pid, args in children(launcher) if args[1:6] == want), None)


def program_pid(launcher, program, index):
    """The pid of the launcher's child running `program` as worker `index` (by its TF_CONFIG),
    or None."""
    for pid, args in children(launcher):
        if program not in args:
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = dict(v.split("=", 1) for v in f.read().decode().split("\0") if "=" in v)
            task = json.loads(env.get("TF_CONFIG", "{}")).get("task", {})
        except (OSError, ValueError, AttributeError):
            continue
        if task.get("type") == "worker" and task.get("index") == index:
            return pid
    return None


class Run:
    """One `pstrain launch` job; optionally kills task role:index at a fraction of its steps."""

    def __init__(self, args, mode, workdir, kill=None):
        self.args, self.mode, self.kill = args, mode, kill
        self.log_dir = os.path.join(workdir, "logs")
        self.checkpoint_dir = os.path.join(workdir, "checkpoints")
        self.training_started = None  # monotonic time of the first progress line
        self.killed_at = None         # seconds into training
        self.killed_after_training = False  # the kill came once every step was done
        self.kill_error = None
        self.lines = []

    def command(self):
        if self.args.program != "builtin":
            return ([self.args.pstrain, "launch", "--mode", self.mode, "--log_dir", self.log_dir,
                     "--checkpoint_dir", self.checkpoint_dir] + PROGRAM_JOB + self.args.job_flag
                    + ["--", sys.executable, SCRIPT, "--data", self.args.data, "--epochs", "1",
                       "--schedule", "constant"])
        return ([self.args.pstrain, "launch", "--data", self.args.data, "--mode", self.mode,
                 "--log_dir", self.log_dir, "--checkpoint_dir", self.checkpoint_dir] + JOB +
                self.args.job_flag)

    def execute(self):
        start = time.monotonic()
        proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, errors="replace")
        out = []
        readers = [threading.Thread(target=lambda: out.append(proc.stdout.read())),
                   threading.Thread(target=self._read_stderr, args=(proc,))]
        for t in readers:
            t.start()
        killer = None
        if self.kill is not None:
            killer = threading.Thread(target=self._kill, args=(proc,))
            killer.start()
        try:
            rc = proc.wait(timeout=self.args.deadline)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the launcher stops what it started
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            rc = "hung"
        for t in readers:
            t.join()
        if killer is not None:
            killer.join()
        self.seconds = time.monotonic() - start
        self.rc = rc
        self.result = result_line("".join(out))
        if self.result is not None and self.args.program != "builtin":
            # The program's worker:0 evaluates the model and prints its own result line.
            for line in self.lines:
                m = re.match(r"pstrain launch: worker:0 result: (\{.*\})$", line)
                if m:
                    self.result["test_accuracy"] = json.loads(m.group(1)).get("test_accuracy")
        return self

    def _read_stderr(self, proc):
        for line in proc.stderr:
            self.lines.append(line.rstrip("\n"))
            if self.training_started is None and line.startswith(("epoch ", "step ")):
                self.training_started = time.monotonic()

    def _kill(self, proc):
        """Kills the task once the job's global step reaches the fraction `at` of its steps (the
        chief's progress lines in its log), so the moment falls in training however loaded the
        machine is."""
        role, index, at = self.kill
        chief_log = os.path.join(self.log_dir, "chief-0.log")
        fraction = None
        program = self.args.program != "builtin"
        while proc.poll() is None:
            fraction = progress(chief_log, self.mode if program else None)
            if fraction is not None and fraction >= at:
                break
            time.sleep(0.02)
        self.killed_after_training = fraction is not None and fraction >= 1
        pid = (program_pid(proc.pid, SCRIPT, index) if program and role == "worker"
               else task_pid(proc.pid, role, index))
        if proc.poll() is not None or pid is None:
            self.kill_error = "%s:%d was not running at %.0f%% of the steps" % (role, index,
                                                                                100 * at)
            return
        os.kill(pid, signal.SIGKILL)
        self.killed_at = time.monotonic() - (self.training_started or time.monotonic())

    def restarts(self):
        return sum(1 for line in self.lines if line.startswith("pstrain launch: restarting "))

    def problems(self, reference, tolerance):
        """Why the run failed; empty if it passed."""
        found = []
        if self.rc != 0:
            found.append("launch exited %s" % self.rc)
        if self.kill_error:
            found.append(self.kill_error)
        r = self.result
        if r is None:
            found.append("no final JSON")
            return found
        acc = r.get("test_accuracy")
        if acc is None:
            found.append("no test_accuracy")
        elif reference is not None and abs(acc - reference) > tolerance:
            found.append("accuracy %.4f is %.4f from the reference %.4f"
                         % (acc, acc - reference, reference))
        if r.get("tasks_applied_once") is not True:
            found.append("tasks_applied_once is %s%s" % (
                r.get("tasks_applied_once"),
                " (%s)" % r["ledger_problem"] if "ledger_problem" in r else ""))
        survivable = self.kill is not None and not self.killed_after_training
        # A chief killed before the job saved its first checkpoint starts again from scratch,
        # which chief_restarts does not count (docs/recovery.md); the launcher's line says so.
        from_scratch = any(l.startswith("pstrain launch: restarting chief:0")
                           and "it resumes from scratch" in l for l in self.lines)
        if survivable and not from_scratch and not r.get("failures_survived", 0) >= 1:
            found.append("failures_survived is %s" % r.get("failures_survived"))
        return found


def cases(args):
    """(seed, mode, role) of every fault run."""
    chosen = []
    if args.cases == "all":
        chosen = [(m, r) for r in args.roles for m in args.modes]
    runs = []
    for k in range(len(chosen) + args.runs):
        rng = random.Random(args.seed + k)
        mode, role = chosen[k] if k < len(chosen) else (rng.choice(args.modes),
                                                        rng.choice(args.roles))
        runs.append((args.seed + k, mode, role, rng))
    return runs


def main(argv):
    args = parse_args(argv)
    root = tempfile.mkdtemp(prefix="pstrain-fault-kills-")
    reference, failed = {}, 0
    rows = []
    try:
        for mode in args.modes:
            accs = []
            for i in range(args.reference_runs):
                run = Run(args, mode, os.path.join(root, "reference-%s-%d" % (mode, i))).execute()
                bad = run.problems(None, args.tolerance)
                acc = (run.result or {}).get("test_accuracy")
                print("reference %s %d: accuracy %s in %.1fs%s" % (
                    mode, i + 1, acc, run.seconds, "; FAILED: " + "; ".join(bad) if bad else ""),
                    flush=True)
                if bad:
                    failed += 1
                    print("\n".join("    " + x for x in run.lines[-15:]), flush=True)
                    continue
                accs.append(acc)
            if not accs:
                print("no fault-free %s run finished: nothing to compare with" % mode)
                return 1
            # The median of the fault-free runs: async runs differ a little between themselves.
            reference[mode] = statistics.median(accs)
            if len(accs) > 1:
                print("fault-free %s spread: %.4f (min %.4f, max %.4f, %d runs)" % (
                    mode, max(accs) - min(accs), min(accs), max(accs), len(accs)), flush=True)
        for k, (seed, mode, role, rng) in enumerate(cases(args)):
            index = rng.randrange(TASKS[role])
            at = rng.uniform(0.05, 0.75)
            run = Run(args, mode, os.path.join(root, "run-%d" % (k + 1)),
                      kill=(role, index, at)).execute()
            bad = run.problems(reference[mode], args.tolerance)
            r = run.result or {}
            acc = r.get("test_accuracy")
            rows.append([k + 1, seed, mode, "%s:%d" % (role, index),
                         ("%.2fs (%2.0f%%)" % (run.killed_at, 100 * at)
                          + (" after training" if run.killed_after_training else ""))
                         if run.killed_at is not None else "-",
                         run.restarts(), r.get("failures_survived", "-"),
                         r.get("tasks_redone", "-"), "%.4f" % acc if acc is not None else "-",
                         "%+.4f" % (acc - reference[mode]) if acc is not None else "-",
                         "ok" if not bad else "FAILED"])
            print("run %d (seed %d, %s, kill %s): %s" % (
                k + 1, seed, mode, rows[-1][3], "ok" if not bad else "FAILED: " + "; ".join(bad)),
                flush=True)
            if bad:
                failed += 1
                print("    log directory: %s" % run.log_dir)
                print("\n".join("    " + x for x in run.lines[-15:]), flush=True)
                args.keep = True
    finally:
        print_table(rows)
        if args.keep:
            print("logs kept in %s" % root)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print("%d of %d fault runs passed" % (sum(1 for r in rows if r[-1] == "ok"), len(rows)))
    return 1 if failed else 0


def print_table(rows):
    header = ["run", "seed", "mode", "role", "kill time", "restarts", "failures_survived",
              "tasks_redone", "accuracy", "delta", "result"]
    table = [header] + [[str(x) for x in row] for row in rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(x.rjust(w) for x, w in zip(row, widths)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
