"""The acceptance run of the PyTorch example: `pstrain launch --ps 2 --workers 2 -- python3
examples/python/mnist_torch.py` trains the CNN on the real MNIST files to test accuracy >= 0.985
in at most 3 epochs, worker 0 prints the final JSON line, the job exits 0 and no process of it is
left behind.

It trains 3 epochs of 60k images on 2 workers (a few minutes on 2 cores).
"""

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import PYTHON, tagged_pids  # noqa: E402

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
SCRIPT = os.path.join(SOURCE_DIR, "examples", "python", "mnist_torch.py")
TARGET = 0.985
EPOCHS = 3
TIMEOUT_S = 840


def json_lines(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def test_launch_trains_the_cnn_to_the_target_accuracy():
    assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
    assert os.path.isdir(os.path.join(SOURCE_DIR, "data", "mnist")), "run scripts/setup.sh"
    tag = uuid.uuid4().hex
    env = dict(os.environ, PSTRAIN_TEST_TAG=tag)  # every process of the job inherits it
    with tempfile.TemporaryDirectory() as logs:
        argv = [BINARY, "launch", "--ps", "2", "--workers", "2", "--log_dir", logs, "--",
                PYTHON, SCRIPT, "--epochs", str(EPOCHS)]
        start = time.monotonic()
        try:
            r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=TIMEOUT_S,
                               stdin=subprocess.DEVNULL)
        finally:
            time.sleep(0.5)
            left = tagged_pids(tag)
            for pid in left:
                os.kill(pid, 9)
        seconds = time.monotonic() - start
        with open(os.path.join(logs, "worker-0.log")) as f:
            worker0 = f.read()
    assert r.returncode == 0, "launch exited %d:\n%s\nworker 0:\n%s" % (
        r.returncode, r.stderr[-3000:], worker0[-3000:])
    assert not left, "processes left behind: %s" % left
    assert json_lines(r.stdout), "launch printed no final JSON line:\n%s" % r.stdout[-3000:]
    # The launcher shows each worker's result line, the last JSON object of its log.
    shown = "pstrain launch: worker:0 result: "
    results = [json.loads(line[len(shown):]) for line in r.stderr.splitlines()
               if line.startswith(shown)]
    assert results, "launch showed no result of worker 0:\n%s\nworker 0:\n%s" % (
        r.stderr[-3000:], worker0[-3000:])
    result = results[-1]
    assert result == json_lines(worker0)[-1]
    print("mnist_torch on 2 PS, 2 workers: %s (%.0f s)" % (result, seconds))
    assert result["steps"] > 0 and result["mode"] in ("async", "sync", "ssp")
    assert result["test_accuracy"] >= TARGET, result
