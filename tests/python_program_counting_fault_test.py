"""Client programs on the chief's tasks under `pstrain launch --rows N -- COMMAND` with one
process killed (SIGKILL) in the middle of training:

- the C++ example (examples/linear_regression.cc) with a worker or the chief killed;
- a PyTorch program with a pstrain.torch.Embedding and a dense parameter that count the rows
  pushed to them: with a worker, a PS or the chief killed, in training or once every task is
  applied, the counts are exact.
"""

import json
import os
import re
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from program_kills import (BINARY, VICTIMS, in_log, launch_and_kill, past_step,  # noqa: E402
                           victim_finder)


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
