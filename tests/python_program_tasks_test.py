"""The chief's task queue for client programs (--model external --rows N) on real clusters: a
chief and PS processes of $PSTRAIN_BINARY on 127.0.0.1, workers as threads of the test's process
or as scripts.

Each push is a one-hot count of the rows of its batch into a variable of one float per row
(SGD with lr 1 subtracts the pushed -1 per row), so the final variable says how often each row
was applied: exactly the epochs, with two workers sharing the tasks, and with a worker killed (SIGKILL) in the middle
of a task and started again, which redoes that task and whose batches the PS drop. The bad
inputs: a push outside a task, a task finished short, a push past a task's last batch, tasks in
a job without a queue.
"""

import json
import os
import signal
import sys
import textwrap
import threading

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import PYTHON, make_cluster, wait_for  # noqa: E402,F401

import pstrain  # noqa: E402
from pstrain import errors  # noqa: E402

ROWS, EPOCHS, TASK_ROWS, BATCH = 600, 2, 100, 32
COUNT = pstrain.optim.SGD(lr=1.0)  # w -= g: a push of -1 per row counts it


def flags(**extra):
    return dict({"rows": ROWS, "epochs": EPOCHS, "task_rows": TASK_ROWS, "task_timeout": 60,
                 "heartbeat_secs": 0.2, "heartbeat_timeout_secs": 3}, **extra)


def one_hot(rows):
    g = np.zeros(ROWS, np.float32)
    np.add.at(g, rows, -1.0)
    return g


def train(client, seen):
    client.create_variable("count", (ROWS,), None, COUNT)
    for task in client.tasks(BATCH):
        assert (task.begin, task.end) == (task.index * TASK_ROWS, (task.index + 1) * TASK_ROWS)
        assert sorted(task.rows()) == list(range(task.begin, task.end))
        for rows in task.batches():
            client.pull()
            client.push([one_hot(rows)], examples=len(rows))
            seen.append((task.epoch, task.index))
    (count,) = client.pull()
    client.done()
    return count


@pytest.mark.parametrize("mode", ["async", "ssp", "sync"])
def test_two_workers_apply_every_row_once_per_epoch(make_cluster, mode):
    cluster = make_cluster(2, 2, flags(mode=mode, staleness=2))
    seen, counts = [[], []], [None, None]

    def work(t):  # each connects in its thread: Connect waits for every worker
        client = cluster.connect(t, timeout=30)
        assert client.has_tasks
        counts[t] = train(client, seen[t])

    threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    result = cluster.finish()
    if mode != "sync":  # sync averages the counts of a step's workers
        # The last pull of the worker that finished last sees every count.
        assert any((c == EPOCHS).all() for c in counts if c is not None), counts
    assert result["tasks_applied_once"] and result["tasks"] == EPOCHS * ROWS // TASK_ROWS
    # Every batch of every task was pushed once (by whichever worker took it).
    assert len(seen[0]) + len(seen[1]) == EPOCHS * (ROWS // TASK_ROWS) * 4  # 4 batches of 32


def test_counts_are_exact(make_cluster):
    cluster = make_cluster(2, 1, flags())
    client = cluster.connect(0, timeout=30)
    count = train(client, [])
    np.testing.assert_array_equal(count, np.full(ROWS, EPOCHS, np.float32))
    result = cluster.finish()
    assert result["tasks_applied_once"] and result["examples"] == EPOCHS * ROWS


def test_a_table_part_no_batch_reaches_still_sees_every_batch(make_cluster):
    """Async tagged sparse pushes of one key (on one PS) still reach the other PS's part of the
    table, with no keys: the chief's final check finds every batch on every part."""
    cluster = make_cluster(2, 1, flags())
    client = cluster.connect(0, timeout=30)
    client.create_table("one", 1, pstrain.init.Constant(0.0), COUNT)
    for task in client.tasks(BATCH):
        for rows in task.batches():
            client.lookup([[0]])
            client.push_sparse([[0]], [np.full(1, -len(rows), np.float32)], examples=len(rows))
    (row,) = client.lookup([[0]])
    client.done()
    assert row[0][0] == EPOCHS * ROWS
    result = cluster.finish()
    assert result["tasks_applied_once"], result


WORKER = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import pstrain
    ROWS, BATCH, DIE_AT = %d, %d, int(sys.argv[1])
    START = sys.argv[3]  # a file whose existence lets this worker take tasks
    def one_hot(rows):
        g = np.zeros(ROWS, np.float32)
        np.add.at(g, rows, -1.0)
        return g
    client = pstrain.Client.connect(timeout=30)
    client.create_variable("count", (ROWS,), None, pstrain.optim.SGD(lr=1.0))
    while not os.path.exists(START):
        time.sleep(0.02)
    pushed = 0
    for task in client.tasks(BATCH):
        for rows in task.batches():
            client.pull()
            client.push([one_hot(rows)], examples=len(rows))
            pushed += 1
            print("pushed", pushed, "task", task.epoch, task.index, flush=True)
            if pushed == DIE_AT:
                os.kill(os.getpid(), 9)  # in the middle of a task: its batches 0..1 applied
    (count,) = client.pull()
    np.save(sys.argv[2], count)
    client.done()
""") % (ROWS, BATCH)


def test_a_killed_worker_task_is_redone_and_applied_once(make_cluster, tmp_path):
    cluster = make_cluster(2, 2, flags())
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = [tmp_path / "count0.npy", tmp_path / "count1.npy"]
    now, later = tmp_path / "now", tmp_path / "later"
    now.touch()
    # Worker 0 takes no task until worker 1 died, so that worker 1 surely dies mid-task.
    w0 = cluster.start_worker(0, [PYTHON, str(script), "0", str(out[0]), str(later)])
    w1 = cluster.start_worker(1, [PYTHON, str(script), "6", str(out[1]), str(now)])
    assert w1.wait(120) == -signal.SIGKILL, w1.output()
    later.touch()
    # Worker 1 started again in its place, as a supervisor would; it rejoins and takes tasks.
    w1 = cluster.start_worker(1, [PYTHON, str(script), "0", str(out[1]), str(now)])
    assert w0.wait(120) == 0, w0.output()
    assert w1.wait(120) == 0, w1.output()
    result = cluster.finish()
    assert result["tasks_applied_once"], result
    assert result["tasks_redone"] >= 1 and result["workers_replaced"] == 1, result
    # The killed worker's batches were not applied twice: every row counted once per epoch.
    count = np.load(out[1])
    np.testing.assert_array_equal(count, np.full(ROWS, EPOCHS, np.float32))


def test_bad_uses_of_tasks_are_refused(make_cluster):
    cluster = make_cluster(1, 1, flags(rows=64, task_rows=64, epochs=1))
    client = cluster.connect(0, timeout=30)
    client.create_variable("count", (64,), None, COUNT)
    client.pull()
    with pytest.raises(errors.FailedPreconditionError, match="a push outside a task"):
        client.push([np.zeros(64, np.float32)])
    with pytest.raises(errors.InvalidArgumentError, match="batch size 0 must be at least 1"):
        client._next_task(0)
    task = client._next_task(40)
    assert (task.num_batches, list(task.rows()[:0])) == (2, [])
    with pytest.raises(errors.InvalidArgumentError,
                       match="task 0 of epoch 0 has 2 batches of 40 rows; 0 were pushed"):
        client._task_done()
    client.push([np.ones(64, np.float32)])
    with pytest.raises(errors.InvalidArgumentError, match="2 batches of 40 rows; 1 were pushed"):
        client._task_done()
    client.pull()
    client.push([np.ones(64, np.float32)])
    client.pull()
    with pytest.raises(errors.FailedPreconditionError, match="2 batches of 40 rows, all pushed"):
        client.push([np.ones(64, np.float32)])
    client._task_done()
    assert client._next_task(40) is None
    (count,) = client.pull()
    # Two batches of +1, each applied once.
    np.testing.assert_array_equal(count, np.full(64, -2, np.float32))
    client.done()
    assert cluster.finish()["tasks_applied_once"]

    plain = make_cluster(1, 1, {"task_timeout": 60})
    client = plain.connect(0, timeout=30)
    assert not client.has_tasks
    with pytest.raises(errors.FailedPreconditionError, match="this job has no task queue"):
        next(client.tasks(8))
    client.done()
    plain.finish()


def test_a_program_that_never_asks_for_a_task_is_named(make_cluster):
    cluster = make_cluster(1, 2, flags(rows=64, task_rows=32, epochs=1, task_timeout=5))
    idle = threading.Event()

    def connect_and_idle():  # connects (its heartbeats keep it alive), then takes no task
        client = cluster.connect(1, timeout=30)
        idle.wait(60)
        del client

    t = threading.Thread(target=connect_and_idle, daemon=True)
    t.start()
    client = cluster.connect(0, timeout=30)
    client.create_variable("count", (64,), None, COUNT)
    for task in client.tasks(16):
        for rows in task.batches():
            client.pull()
            client.push([np.zeros(64, np.float32)])
    client.done()
    try:
        assert cluster.chief.wait(60) != 0
    finally:
        idle.set()
    assert "worker:1 sent no progress for 5s" in cluster.chief.output(), cluster.chief.output()
