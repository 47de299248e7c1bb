"""Client programs on the chief's tasks under `pstrain launch --rows N -- COMMAND`, with one
process killed (SIGKILL) in the middle of training, as fault_kills.py does to built-in jobs:

- the PyTorch CNN (examples/python/mnist_torch.py), async and sync: a worker's Python process
  killed (restarted by the launcher; async: its task handed out again; sync: the job rolls
  back), or a PS (restarted; the job rolls back and the scripts go on, their tasks in hand
  abandoned). The job ends by itself with exit code 0, every task applied once (the chief's
  check of the ledger and of every PS's task watermarks) and a sound test accuracy;
- the C++ example (examples/linear_regression.cc) with a worker or the chief killed;
- a PyTorch program with a pstrain.torch.Embedding and a dense parameter that count the rows
  pushed to them: with a worker, a PS or the chief killed, the counts are exact;
- the chief killed (restarted from the latest checkpoint; the programs register with it and
  create their parameters again), in training or once every task is applied.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from fault_kills import program_pid, task_pid  # noqa: E402

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(SOURCE_DIR, "examples", "python", "mnist_torch.py")
DATA = os.path.join(SOURCE_DIR, "data", "mnist")


def worker_pid(launcher, index, program=SCRIPT):
    return program_pid(launcher, program, index)


# The task each kind of test victim kills: a worker's program, a PS, or the chief.
VICTIMS = {"worker": "worker:1", "ps": "ps:1", "chief": "chief:0", "chief_at_end": "chief:0",
           "ps_at_end": "ps:1"}


def victim_finder(victim, program):
    if victim == "worker":
        return lambda launcher: worker_pid(launcher, 1, program)
    if victim.startswith("ps"):
        return lambda launcher: task_pid(launcher, "ps", 1)
    return lambda launcher: task_pid(launcher, "chief", 0)


def past_step(step):
    """True of the launch's stderr once the chief's progress passed `step`."""
    return lambda lines: any(int(m.group(1)) >= step for m in
                             (re.search(r"step (\d+) ", l) for l in lines) if m)


def in_log(path, text):
    """True once the log file `path` holds `text`."""
    def seen(_):
        try:
            with open(path, errors="replace") as f:
                return text in f.read()
        except FileNotFoundError:
            return False
    return seen


def launch_and_kill(argv, at_step, find_pid):
    """Runs `pstrain launch` `argv`, SIGKILLs find_pid(launcher pid) once the chief's progress
    passed `at_step` (or once at_step(stderr lines) is true), and waits for the launch: (exit
    code, its stderr, its result line)."""
    due = past_step(at_step) if isinstance(at_step, int) else at_step
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL, errors="replace")
    lines, out = [], []
    readers = [threading.Thread(target=lambda: lines.extend(proc.stderr)),
               threading.Thread(target=lambda: out.append(proc.stdout.read()))]
    for t in readers:
        t.start()
    try:
        deadline = time.monotonic() + 240
        while not due(list(lines)):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.02)
        pid = find_pid(proc.pid)
        assert pid is not None, "".join(lines)
        os.kill(pid, signal.SIGKILL)
        rc = proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for t in readers:
            t.join()
    result = out[0].strip().splitlines()[-1] if out and out[0].strip() else "{}"
    return rc, "".join(lines), json.loads(result)


@pytest.mark.parametrize("victim,mode", [("worker", "async"), ("ps", "async"), ("worker", "sync"),
                                         ("ps", "sync"), ("chief", "sync")])
def test_a_killed_script_or_ps_and_every_task_applied_once(tmp_path, victim, mode):
    """A worker's script killed: restarted, its task handed out again. A PS killed: restarted,
    the job rolled back to its latest checkpoint (or the initial values) with the scripts going
    on, their tasks in hand abandoned. The chief killed: restarted from the latest checkpoint,
    the scripts register with it and create their variables again without noticing."""
    assert BINARY and os.access(BINARY, os.X_OK), "PSTRAIN_BINARY=%r is not built" % BINARY
    argv = [BINARY, "launch", "--ps", "2", "--workers", "2", "--rows", "32000", "--epochs", "1",
            "--task_rows", "3200", "--heartbeat_timeout_secs", "2", "--log_dir", str(tmp_path),
            "--mode", mode, "--", "/usr/bin/python3", SCRIPT, "--data", DATA, "--epochs", "1",
            "--schedule", "constant"]
    find = victim_finder(victim, SCRIPT)
    # Killed once the job is well under way: 150 of its 500 steps pushed (the chief once it
    # saved a checkpoint to resume from).
    when = past_step(150)
    if victim == "chief":
        when = lambda lines: past_step(150)(lines) and in_log(
            str(tmp_path / "chief-0.log"), " saved: ")(lines)
    rc, err, result = launch_and_kill(argv, when, find)
    assert rc == 0, err
    assert ("restarting %s" % VICTIMS[victim]) in err, err
    assert result["tasks_applied_once"], result
    assert result["tasks_applied"] == result["tasks"] == 10, result
    if victim == "worker" and mode == "async":
        # Its task, if it held one (it may die between two), was redone: tasks_applied_once.
        assert result["workers_replaced"] == 1, result
    elif victim == "chief":
        assert result["chief_restarts"] == 1 and result["rollbacks"] == 0, result
    else:  # a PS, or in sync a worker: the job rolled back
        assert result["rollbacks"] == 1, result
    accuracy = json.loads(re.search(r"worker:0 result: (\{.*\})", err).group(1))
    assert accuracy["test_accuracy"] >= 0.95, accuracy


@pytest.mark.parametrize("victim", ["worker", "chief"])
def test_the_cpp_example_on_tasks_survives_a_killed_worker_or_chief(tmp_path, victim):
    """The C++ client program (examples/linear_regression.cc) on tasks: worker 1 killed once
    the job is under way, restarted by the launcher, or the chief killed once it saved a
    checkpoint, restarted from it; every task applied once and the model learnt."""
    example = os.path.join(os.path.dirname(BINARY), "linear_regression")
    assert os.access(example, os.X_OK), "%s is not built" % example
    argv = [BINARY, "launch", "--ps", "2", "--workers", "2", "--rows", "200000", "--epochs", "2",
            "--task_rows", "10000", "--heartbeat_timeout_secs", "2", "--log_dir", str(tmp_path),
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--checkpoint_every_steps", "2000",
            "--", example, "--examples", "200000", "--batch", "32", "--lr", "0.05"]
    when = 2000
    if victim == "chief":
        when = lambda lines: past_step(2000)(lines) and in_log(
            str(tmp_path / "chief-0.log"), " saved: ")(lines)
    rc, err, result = launch_and_kill(argv, when, victim_finder(victim, example))
    assert rc == 0, err
    assert ("restarting %s" % VICTIMS[victim]) in err, err
    assert result["tasks_applied_once"], result
    if victim == "worker":
        assert result["workers_replaced"] == 1, result
    else:
        assert result["chief_restarts"] == 1, result
    assert result["tasks_applied"] == result["tasks"] == 40, result
    for i in range(2):
        worker = json.loads(re.search(r"worker:%d result: (\{.*\})" % i, err).group(1))
        assert worker["w_error"] < 0.02, worker


COUNTING = """
import sys, time
import numpy as np
import torch
import pstrain, pstrain.torch

KEYS, BATCH = 500, 32
client = pstrain.Client.connect(timeout=60)
sgd = pstrain.optim.SGD(lr=1.0)


class Counter(torch.nn.Module):
    # The gradient of -sum(rows) - n * bias is -1 per id and -n: SGD with lr 1 counts them.
    def __init__(self):
        super().__init__()
        self.emb = pstrain.torch.Embedding(client, "emb", 1, optimizer=sgd,
                                           initializer=pstrain.init.Constant(0.0))
        self.bias = torch.nn.Parameter(torch.zeros(1))

    def forward(self, ids):
        return -self.emb(ids).sum() - len(ids) * self.bias.sum()


model = Counter()
ps_model = pstrain.torch.distribute(model, client, optimizer=sgd,
                                    initializer=pstrain.init.Constant(0.0))
for task in client.tasks(BATCH):
    for rows in task.batches():
        ps_model.pull()
        model.zero_grad()
        model(torch.from_numpy(rows % KEYS)).backward()
        ps_model.push(examples=len(rows))
        time.sleep(0.03)  # steps long enough to be killed in the middle of a task
client.barrier("counted")
ps_model.pull()
with torch.no_grad():
    rows = model.emb(torch.arange(KEYS)).numpy().ravel()
if client.task == 0:
    np.save(sys.argv[1], np.concatenate([rows, model.bias.detach().numpy()]))
client.done()
"""


@pytest.mark.parametrize("victim", ["worker", "ps", "chief", "chief_at_end", "ps_at_end"])
def test_an_embedding_program_counts_every_row_once(tmp_path, victim):
    """A PyTorch program with a pstrain.torch.Embedding and a dense parameter that count the
    rows they are pushed (6000 rows, 2 epochs: each of the 500 ids 24 times, the bias 12000),
    with a worker, a PS or the chief killed in the middle, or the chief killed once every task
    is applied (the programs then past their task loops, at the barrier, reading the rows or
    in done()), or a PS then (the job rolls back to that checkpoint; the programs read the
    restored rows and report done again): the counts are exact."""
    script = tmp_path / "count.py"
    script.write_text(COUNTING)
    out = tmp_path / "counts.npy"
    argv = [BINARY, "launch", "--ps", "2", "--workers", "2", "--rows", "6000", "--epochs", "2",
            "--task_rows", "300", "--heartbeat_timeout_secs", "2",
            "--checkpoint_dir", str(tmp_path / "ckpt"), "--checkpoint_every_steps", "100",
            "--log_dir",
            str(tmp_path / "logs"), "--", "/usr/bin/python3", str(script), str(out)]
    when = 100
    chief_log = str(tmp_path / "logs" / "chief-0.log")
    if victim == "chief":  # once there is a checkpoint to resume from
        when = lambda lines: past_step(100)(lines) and in_log(chief_log, " saved: ")(lines)
    if victim.endswith("_at_end"):
        when = in_log(chief_log, "every task is applied")
    rc, err, result = launch_and_kill(argv, when, victim_finder(victim, str(script)))
    assert rc == 0, err
    assert ("restarting %s" % VICTIMS[victim]) in err, err
    if victim.startswith("chief"):
        assert result["chief_restarts"] == 1, result
    assert result["tasks_applied_once"] and result["tasks_applied"] == 40, result
    counts = np.load(out)
    np.testing.assert_array_equal(counts[:500], np.full(500, 24, np.float32))
    assert counts[500] == 12000, counts[500]
