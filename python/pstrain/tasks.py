"""The chief's task queue from a script: ``for task in client.tasks(batch_size)``.

A job whose chief has ``--rows N`` cuts the rows of the scripts' data into tasks and hands them
out (docs/recovery.md). A script trains on them as::

    for task in client.tasks(batch_size=64):
        for rows in task.batches():           # int64 row indices into the script's data
            ...pull, compute on data[rows], push...

Every push inside a task is tagged (epoch, task, batch) by the client, so a task handed out
again after a failure applies each batch once. Batch k of a task must be the same rows whoever
trains it: index the data with the rows given, the same data on every worker.
"""

__all__ = ["Task"]


class Task:
    """A task of the chief's queue: rows ``[begin, end)`` of epoch ``epoch``, in the order
    :meth:`rows` gives, cut into batches of ``batch_size``."""

    def __init__(self, client, task):
        self._client = client
        self._task = task
        self.epoch, self.index = task.epoch, task.index
        self.begin, self.end = task.begin, task.end
        self.seed, self.batch_size = task.seed, task.batch_size
        self.num_batches = task.num_batches

    def rows(self):
        """The task's rows (int64), ``[begin, end)`` shuffled by its seed: the same order on
        every worker and every run."""
        return self._task.rows()

    def batches(self):
        """Yields the rows of each batch in turn (int64 arrays); after the last batch was
        trained (its pushes made), finishes the task with the chief. Leaving the loop early
        leaves the task in hand: the next task asked for is this one again, from its first
        batch (the PS drop the batches already applied). When the job rolls back meanwhile (a
        PS died), the task is abandoned: the loop stops at the next batch and the next task
        is one of the restored job; nothing is raised."""
        rows = self.rows()
        for k in range(self.num_batches):
            if self._client._task_abandoned:
                return
            yield rows[k * self.batch_size:(k + 1) * self.batch_size]
        self._client._task_done()

    def __repr__(self):
        return "<pstrain.Task %d of epoch %d: rows [%d, %d), %d batches of %d>" % (
            self.index, self.epoch, self.begin, self.end, self.num_batches, self.batch_size)


def tasks(client, batch_size):
    """Yields the job's tasks for this worker until every task of every epoch is applied (then
    call ``client.done()``, or leave the ``with`` block). Waits while every task is handed out
    and some are still in flight. FailedPreconditionError in a job without tasks."""
    while True:
        task = client._next_task(int(batch_size))
        if task is None:
            return
        yield Task(client, task)
