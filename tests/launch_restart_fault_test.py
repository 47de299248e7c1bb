"""`pstrain launch --restart_failed`: a task killed with SIGKILL is started again and the job
finishes; a task that dies more often than --max_restarts ends the job naming it, with the end of
its log; --restart_failed=false, and a job without the task queue, end as they did before
restarts existed.
"""

import os
import re
import signal
import subprocess
import threading
import time

from fault_kills import result_line, task_pid

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
DATA = os.path.join(SOURCE_DIR, "data", "mnist")
# A small MNIST job on the task queue; a short heartbeat timeout lets a chief that waits for a
# dead incarnation's deadline take its restarted process quickly.
JOB = ["launch", "--ps", "2", "--workers", "2", "--data", DATA, "--batch", "256", "--hidden",
       "32", "--heartbeat_timeout_secs", "2"]
QUEUE = ["--task_rows", "3840"]
TIMEOUT_S = 120


class Launch:
    """A running `pstrain launch`, its stderr collected line by line."""

    def __init__(self, flags):
        assert BINARY and os.access(BINARY, os.X_OK), "PSTRAIN_BINARY=%r is not built" % BINARY
        assert os.path.isdir(DATA), "%s is missing: run scripts/setup.sh" % DATA
        self.proc = subprocess.Popen([BINARY] + JOB + flags, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                                     errors="replace")
        self.lines, self.out = [], []
        self.readers = [threading.Thread(target=self._read), threading.Thread(
            target=lambda: self.out.append(self.proc.stdout.read()))]
        for t in self.readers:
            t.start()

    def _read(self):
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    @property
    def err(self):
        return "\n".join(self.lines)

    def wait_for(self, text, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if any(text in line for line in self.lines):
                return
            assert self.proc.poll() is None, "launch ended before %r:\n%s" % (text, self.err)
            time.sleep(0.05)
        raise AssertionError("no %r within %ds:\n%s" % (text, timeout, self.err))

    def task_pid(self, job, index, other_than=None, timeout=30):
        """The pid of the launcher's child `pstrain server --job job --task index`."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            pid = task_pid(self.proc.pid, job, index)
            if pid is not None and pid != other_than:
                return pid
            time.sleep(0.05)
        raise AssertionError("no %s:%d process:\n%s" % (job, index, self.err))

    def finish(self):
        try:
            rc = self.proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            rc = "timeout"
        for t in self.readers:
            t.join()
        result = result_line("".join(self.out))
        return rc, result


def test_a_killed_worker_is_restarted_and_the_job_finishes(tmp_path):
    launch = Launch(QUEUE + ["--epochs", "3", "--log_dir", str(tmp_path)])
    launch.wait_for("epoch ")
    os.kill(launch.task_pid("worker", 1), signal.SIGKILL)
    rc, result = launch.finish()
    assert rc == 0, launch.err
    assert "pstrain launch: restarting worker:1 (killed by SIGKILL), restart 1 of 5" in launch.err
    assert re.search(r"pstrain launch: \d+ restarts? \(worker:1 (once|\d+ times)\) during the job",
                     launch.err), launch.err
    assert result is not None and result["tasks_applied_once"] is True, launch.err
    # Launch gave the chief checkpoints to restart it from.
    assert (tmp_path / "checkpoints").is_dir()
    assert "checkpoints (to restart failed tasks from): %s/checkpoints" % tmp_path in launch.err


def test_a_task_dying_more_often_than_max_restarts_ends_the_job(tmp_path):
    launch = Launch(QUEUE + ["--epochs", "50", "--max_restarts", "1", "--log_dir", str(tmp_path)])
    launch.wait_for("epoch ")
    first = launch.task_pid("worker", 1)
    os.kill(first, signal.SIGKILL)
    launch.wait_for("restarting worker:1 (killed by SIGKILL), restart 1 of 1")
    try:
        os.kill(launch.task_pid("worker", 1, other_than=first), signal.SIGKILL)
    except ProcessLookupError:
        pass  # the restarted process died by itself: as good a second death
    rc, _ = launch.finish()
    assert rc == 1, launch.err
    log = tmp_path / "worker-1.log"
    assert ("pstrain launch: error: worker:1 " in launch.err
            and "(log: %s); restarted once already (--max_restarts 1); stopping the cluster"
            % log in launch.err), launch.err
    assert "pstrain launch: the end of worker:1's log:" in launch.err
    assert "restart 2 of" not in launch.err


def test_restart_failed_false_ends_the_job_when_a_task_dies(tmp_path):
    launch = Launch(QUEUE + ["--epochs", "50", "--restart_failed=false", "--log_dir",
                             str(tmp_path)])
    launch.wait_for("epoch ")
    os.kill(launch.task_pid("ps", 0), signal.SIGKILL)
    rc, _ = launch.finish()
    assert rc == 1, launch.err
    assert "pstrain launch: error: ps:0 was killed by signal 9 (SIGKILL)" in launch.err
    assert "restarting" not in launch.err
    # Without restarts launch adds no checkpoints.
    assert not (tmp_path / "checkpoints").exists()


def test_a_job_without_the_task_queue_is_not_restarted(tmp_path):
    launch = Launch(["--epochs", "50", "--task_rows", "0", "--log_dir", str(tmp_path)])
    launch.wait_for("epoch ")
    os.kill(launch.task_pid("worker", 0), signal.SIGKILL)
    rc, _ = launch.finish()
    assert rc == 1, launch.err
    assert ("worker:0 was killed by signal 9 (SIGKILL); this job has no recovery (no task queue: "
            "--task_rows 0, or --model external without --rows), so it is not restarted"
            ) in launch.err
    assert "pstrain launch: error: worker:0 was killed by signal 9" in launch.err
    assert "restarting" not in launch.err


def test_resume_reaches_the_chief_and_a_killed_chief_resumes_from_its_directory(tmp_path):
    checkpoints = tmp_path / "ckpt"
    # Long enough that the first checkpoint comes well before the job's end on a fast machine
    # too (6 epochs of 705 steps took 1.8 s on a quiet one), so the chief dies mid-job.
    launch = Launch(["--epochs", "6", "--resume", str(checkpoints), "--checkpoint_every_secs",
                     "0.25", "--log_dir", str(tmp_path / "logs")])
    launch.wait_for("saved")  # a first checkpoint in --resume's directory
    os.kill(launch.task_pid("chief", 0), signal.SIGKILL)
    rc, result = launch.finish()
    assert rc == 0, launch.err
    assert ("pstrain launch: restarting chief:0 (killed by SIGKILL), restart 1 of 5; it resumes "
            "from %s" % checkpoints) in launch.err
    assert "checkpoints (to restart failed tasks from)" not in launch.err
    assert result["chief_restarts"] == 1 and result["tasks_applied_once"] is True, launch.err
    assert any(p.name.startswith("ckpt-") for p in checkpoints.iterdir())
