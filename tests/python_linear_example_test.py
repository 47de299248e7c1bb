"""examples/python/linear_numpy.py as a user runs it: every worker of `pstrain launch --` (and of a
cluster started by hand) is the script, on real processes over 127.0.0.1.

The script's data follow y = X w* + 0.5 + noise with w* = default_rng(--truth_seed)'s first
normals; the test draws w* itself and checks that the trained model (printed by each worker)
is within the noise's reach of it. Every process carries a tag in its environment, and no tagged
process may outlive a test.
"""

import json
import os
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import free_ports, tagged_pids  # noqa: E402

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
EXAMPLE = os.path.join(SOURCE_DIR, "examples", "python", "linear_numpy.py")
PYTHON = "/usr/bin/python3"
STEPS = 200
BATCH = 32
DIM = 10
TRUTH_SEED = 11


def last_json(text):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


@pytest.fixture
def tag():
    """A tag for the test's processes; fails the test if one is left running."""
    value = "%d-%s" % (os.getpid(), uuid.uuid4().hex[:12])
    yield value
    deadline = time.monotonic() + 5
    while tagged_pids(value) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = tagged_pids(value)
    for pid in left:
        os.kill(pid, 9)
    assert not left, "processes left running: %s" % left


def environment(tag, **extra):
    env = dict(os.environ, PSTRAIN_TEST_TAG=tag)
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def check_worker(result, task, mode):
    """A worker's result line: its task, and the model near the true one."""
    w_star = np.random.default_rng(TRUTH_SEED).standard_normal(DIM)
    assert result["task"] == task
    assert result["mode"] == mode
    assert result["steps"] == STEPS
    w = np.array(result["w"])
    # y's noise is 0.01: what is left of the error is the noise's.
    assert np.linalg.norm(w - w_star) < 0.02, (w, w_star)
    assert abs(result["b"] - 0.5) < 0.02, result
    assert result["mse"] < 1e-3, result


def example_args():
    return [PYTHON, EXAMPLE, "--steps", str(STEPS), "--batch", str(BATCH), "--dim", str(DIM),
            "--truth_seed", str(TRUTH_SEED)]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_launch_runs_the_script_as_every_worker(tmp_path, tag, mode):
    assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
    argv = [BINARY, "launch", "--ps", "2", "--workers", "2", "--mode", mode, "--log_dir",
            str(tmp_path), "--"] + example_args()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=environment(tag),
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    job = last_json(r.stdout)
    assert job is not None, r.stdout + r.stderr
    assert job["mode"] == mode
    assert job["worker_steps"] == [STEPS, STEPS]
    assert job["examples"] == 2 * STEPS * BATCH
    assert job["global_step"] == (STEPS if mode == "sync" else 2 * STEPS)
    for task in range(2):
        log = tmp_path / ("worker-%d.log" % task)
        assert "worker:%d log: %s" % (task, log) in r.stderr
        result = last_json(log.read_text())
        assert result is not None, log.read_text()
        check_worker(result, task, mode)
        assert result["global_step"] == job["global_step"]


def test_a_failing_script_fails_the_launch_with_its_status_and_log(tmp_path, tag):
    argv = [BINARY, "launch", "--ps", "1", "--workers", "2", "--log_dir", str(tmp_path), "--",
            PYTHON, EXAMPLE, "--steps", "0"]
    start = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environment(tag),
                       stdin=subprocess.DEVNULL)
    assert time.monotonic() - start < 30, r.stderr
    assert r.returncode == 2, r.stderr  # argparse's status, passed on
    assert "exited with status 2 (log: %s/worker-" % tmp_path in r.stderr
    assert "--steps must be positive" in r.stderr  # the end of its log


def test_a_script_that_raises_ends_the_job_and_shows_its_traceback(tmp_path, tag):
    """The exception reaches the chief through done(error); the launch shows the traceback."""
    script = ("import pstrain\n"
              "with pstrain.Client.connect() as client:\n"
              "    client.create_variable('w', (3,))\n"
              "    if client.task == 1:\n"
              "        raise ValueError('bad data in shard 1')\n"
              "    client.barrier('end')\n")
    argv = [BINARY, "launch", "--ps", "1", "--workers", "2", "--log_dir", str(tmp_path), "--",
            PYTHON, "-c", script]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environment(tag),
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 1, r.stderr
    assert "worker:1 failed: ValueError: bad data in shard 1" in r.stderr  # the chief's
    assert "worker:1 exited with status 1 (log: %s/worker-1.log)" % tmp_path in r.stderr
    assert "    ValueError: bad data in shard 1\n" in r.stderr  # the end of its log


def test_a_script_finds_the_package_of_the_build_without_pythonpath(tmp_path, tag):
    """`build/pstrain launch -- python3 script.py` imports the pstrain package built beside the
    binary, ahead of what the user's PYTHONPATH holds and keeping it; the script learns the
    number of workers from the client."""
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "user_module.py").write_text("VALUE = 41\n")
    script = ("import importlib.util, json, pstrain\n"
              "found = importlib.util.find_spec('user_module') is not None\n"
              "with pstrain.Client.connect() as client:\n"
              "    print(json.dumps({'file': pstrain.__file__, 'task': client.task,\n"
              "                      'workers': client.num_workers,\n"
              "                      'user': found}))\n"
              "    client.barrier('end')\n")
    package = os.path.join(os.path.dirname(os.path.abspath(BINARY)), "python", "pstrain",
                           "__init__.py")
    for pythonpath in (None, str(tmp_path / "user")):
        env = environment(tag)
        env.pop("PYTHONPATH", None)
        if pythonpath is not None:
            env["PYTHONPATH"] = pythonpath
        logs = tmp_path / ("logs-%s" % ("none" if pythonpath is None else "user"))
        argv = [BINARY, "launch", "--ps", "1", "--workers", "3", "--log_dir", str(logs), "--",
                PYTHON, "-c", script]
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env,
                           cwd=str(tmp_path), stdin=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        job = last_json(r.stdout)
        assert job is not None and "final_loss" not in job, r.stdout  # nobody reported one
        for task in range(3):
            line = last_json((logs / ("worker-%d.log" % task)).read_text())
            assert line == {"file": package, "task": task, "workers": 3,
                            "user": pythonpath is not None}, line


def test_a_cluster_started_by_hand_runs_the_script_as_each_worker(tag):
    """As the README shows: the chief (--model external), the PS, then the script per worker."""
    ports = free_ports(5)
    cluster = {"chief": ["127.0.0.1:%d" % ports[0]],
               "ps": ["127.0.0.1:%d" % p for p in ports[1:3]],
               "worker": ["127.0.0.1:%d" % p for p in ports[3:5]]}

    def start(argv, job, index):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})
        return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=environment(tag, TF_CONFIG=tf_config),
                                stdin=subprocess.DEVNULL)

    procs = [start([BINARY, "server", "--model", "external", "--mode", "sync"], "chief", 0)]
    procs += [start([BINARY, "server"], "ps", i) for i in range(2)]
    workers = [start(example_args(), "worker", i) for i in range(2)]
    try:
        for task, w in enumerate(workers):
            out, err = w.communicate(timeout=120)
            assert w.returncode == 0, err
            check_worker(last_json(out), task, "sync")
        out, err = procs[0].communicate(timeout=60)
        assert procs[0].returncode == 0, err
        assert last_json(out)["worker_steps"] == [STEPS, STEPS]
        for p in procs[1:]:
            assert p.wait(timeout=30) == 0
    finally:
        for p in procs + workers:
            if p.poll() is None:
                p.kill()
                p.communicate()
