"""What the client-program kill tests share (python_program_launch_fault_test.py,
python_program_counting_fault_test.py): run `pstrain launch ... -- COMMAND` and SIGKILL one of
its processes (a worker's program, a PS or the chief) once the job reached a point, as
fault_kills.py does to built-in jobs."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

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
