"""Client programs on the chief's tasks under `pstrain launch --rows N -- COMMAND`, with one
process killed (SIGKILL) in the middle of training, as fault_kills.py does to built-in jobs:
the PyTorch CNN (examples/python/mnist_torch.py), async and sync: a worker's Python process
killed (restarted by the launcher; async: its task handed out again; sync: the job rolls back),
a PS (restarted; the job rolls back and the scripts go on, their tasks in hand abandoned), or
the chief (restarted from the latest checkpoint; the programs register with it and create their
parameters again). The job ends by itself with exit code 0, every task applied once (the
chief's check of the ledger and of every PS's task watermarks) and a sound test accuracy.
The C++ example and a counting PyTorch program under kills are in
python_program_counting_fault_test.py.
"""

import json
import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from program_kills import (BINARY, DATA, SCRIPT, VICTIMS, in_log, launch_and_kill,  # noqa: E402
                           past_step, victim_finder)


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
