"""Start-up under load: 30 `pstrain launch` runs in a row while both cores are busy must all
start, train and print their result (PSTRAIN_STRESS_RUNS sets another count for a deeper run).

A loaded 2-core machine used to fail about one run in ten at start-up (a connect that timed out
before the peer was ready). Busy-loop processes take every core for the whole test.
"""

import json
import os
import subprocess
import sys
import time

RUNS = int(os.environ.get("PSTRAIN_STRESS_RUNS", "30"))
RUN_TIMEOUT_S = 120
BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
JOB = ["launch", "--ps", "2", "--workers", "2", "--epochs", "1", "--hidden", "32",
       "--batch", "256"]


def result_line(stdout):
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def test_launches_on_a_loaded_machine_all_finish():
    assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
    data = os.path.join(SOURCE_DIR, "data", "mnist")
    assert os.path.isdir(data), "%s is missing: run scripts/setup.sh" % data
    loaders = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(max(2, os.cpu_count() or 2))]
    failures, seconds = [], []
    start = time.monotonic()
    try:
        for run in range(RUNS):
            t = time.monotonic()
            try:
                r = subprocess.run([BINARY] + JOB + ["--data", data], capture_output=True,
                                   text=True, timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
                rc, out, err = r.returncode, r.stdout, r.stderr
            except subprocess.TimeoutExpired as e:  # the launcher stops what it started
                rc, out, err = "timeout", e.stdout or "", e.stderr or ""
                out, err = [x.decode(errors="replace") if isinstance(x, bytes) else x
                            for x in (out, err)]
            seconds.append(time.monotonic() - t)
            result = result_line(out)
            if rc != 0 or result is None or result.get("steps", 0) <= 0:
                failures.append("run %d: exit %s, result %s; stderr ends: %s"
                                % (run + 1, rc, result, err[-800:].strip()))
    finally:
        for p in loaders:
            p.kill()
            p.wait()
    total = time.monotonic() - start
    print("%d launches under load in %.0f s (per run: min %.1f s, max %.1f s, mean %.1f s); "
          "%d failed" % (RUNS, total, min(seconds), max(seconds), total / RUNS, len(failures)))
    assert not failures, "%d of %d launches failed on a loaded machine:\n  %s" % (
        len(failures), RUNS, "\n  ".join(failures))
