"""Reading a checkpoint outside a job: :func:`load_checkpoint`."""

from . import _pstrain

__all__ = ["Checkpoint", "load_checkpoint"]


class Checkpoint:
    """A checkpoint's trained parameters, as :func:`load_checkpoint` returns them.

    Attributes:
      path: the ``ckpt-<step>`` directory read.
      global_step: the job's global step at the cut.
      variables: ``{name: numpy.ndarray}``, each dense variable whole (its shards reassembled),
        float32 of the variable's shape, in the checkpoint's order.
      tables: ``{name: (keys, rows)}``, each embedding table's rows: ``keys`` uint64 of shape
        ``(n,)``, ``rows`` float32 of shape ``(n, dim)``, the row of ``keys[i]`` at ``rows[i]``
        (the optimizer's slots are not included).
    """

    def __init__(self, path, global_step, variables, tables):
        self.path = path
        self.global_step = global_step
        self.variables = dict(variables)
        self.tables = {name: (keys, rows) for name, keys, rows in tables}

    def __repr__(self):
        return "<pstrain.Checkpoint %s global_step=%d variables=%d tables=%d>" % (
            self.path, self.global_step, len(self.variables), len(self.tables))


def load_checkpoint(path):
    """Reads the checkpoint at ``path`` (a ``ckpt-<step>`` directory, or a ``--checkpoint_dir``
    whose newest valid checkpoint is read) with the checks of a restore and returns a
    :class:`Checkpoint`. A damaged checkpoint raises :class:`pstrain.DataLossError` naming the
    file and what is wrong with it; a path with no checkpoint :class:`pstrain.NotFoundError`."""
    return Checkpoint(*_pstrain._load_checkpoint(str(path)))
