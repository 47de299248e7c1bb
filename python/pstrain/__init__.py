"""pstrain for Python: train on pstrain's parameter servers from numpy or PyTorch.

A worker script connects a :class:`Client` to the chief of a cluster (started with ``pstrain
server --job chief --model external``, by ``pstrain launch``, or in-process with
:class:`Server`), creates its variables, and loops pull -> compute gradients -> push::

    import pstrain
    with pstrain.Client.connect() as client:          # chief and task from TF_CONFIG
        client.create_variable("w", (784, 10), initializer=pstrain.init.GlorotUniform(seed=1),
                               optimizer=pstrain.optim.Adam(lr=1e-3))
        for batch in data:
            (w,) = client.pull()                      # float32 views of the client's buffers
            client.push([gradient(w, batch)], examples=len(batch))

See docs/python.md for the lifetime of pulled arrays, the dtype rule of pushes, threads,
exceptions and Ctrl-C.
"""

import difflib as _difflib

from . import errors
from .errors import *  # noqa: F401,F403 (the exception classes, also at top level)
from . import init, optim
from .checkpoint import Checkpoint, load_checkpoint
from ._pstrain import Client, ClusterSpec, cluster_from_tf_config
from . import _pstrain
from .tasks import Task, tasks as _tasks

Client.tasks = _tasks

Client.__module__ = ClusterSpec.__module__ = cluster_from_tf_config.__module__ = __name__

__all__ = ["Checkpoint", "Client", "ClusterSpec", "Server", "Task", "cluster_from_tf_config",
           "errors", "init", "load_checkpoint", "optim"] + errors.__all__


def _flag_args(flags):
    """Keyword flags as the command-line flags of ``pstrain server``."""
    known = _pstrain._server_flag_names()
    args = []
    for name, value in flags.items():
        if name not in known:
            close = _difflib.get_close_matches(name, known, n=1)
            raise errors.InvalidArgumentError(
                "Server: unknown flag %s%s" % (name, "; did you mean %s?" % close[0] if close
                                               else ""))
        if isinstance(value, bool):
            args.append("--%s=%s" % (name, "true" if value else "false"))
        elif isinstance(value, (list, tuple)):
            args.append("--%s=%s" % (name, ",".join(str(v) for v in value)))
        else:
            args.append("--%s=%s" % (name, value))
    return args


class Server:
    """Runs task ``task`` of job ``job`` ("ps" or "chief") of ``cluster`` in this process, on a
    thread of its own, as ``tf.distribute.Server`` does; :meth:`join` waits for the job to end.

    ``cluster`` is a :class:`ClusterSpec` (or what its constructor takes); ``job`` and ``task``
    default to its TF_CONFIG task. Keyword flags are those of ``pstrain server`` without the
    dashes (``mode="sync", optimizer="sgd", lr=0.1, connect_timeout=30``); the chief reads the
    training flags, ``model`` defaults to "external" (workers are Client scripts). ``log_level``
    ("trace" ... "off") sets the level of pstrain's logging on stderr for the whole process.
    A chief here does not take over SIGINT: Ctrl-C raises KeyboardInterrupt in :meth:`join`,
    which then asks the job to stop, as the ``pstrain server`` chief does on SIGINT.
    """

    def __init__(self, cluster, job=None, task=None, **flags):
        if not isinstance(cluster, ClusterSpec):
            cluster = ClusterSpec(cluster)
        if job is None:
            problem = _pstrain._tf_config_task_error(cluster)
            if problem is not None:
                raise errors.InvalidArgumentError(problem)
            if cluster.task_type is None:
                raise errors.InvalidArgumentError(
                    "Server: no task: pass job and task, or give the cluster a \"task\"")
            job = cluster.task_type
            if task is None:
                task = cluster.task_index or 0
        log_level = flags.pop("log_level", None)
        if log_level is not None:
            _pstrain._set_log_level(log_level)
        flags.setdefault("model", "external")
        self._server = _pstrain._Server(cluster, job, 0 if task is None else task,
                                        _flag_args(flags))

    @property
    def job(self):
        return self._server.job

    @property
    def task(self):
        return self._server.task

    @property
    def exit_code(self):
        """The task's exit code once it ended (0: the job succeeded), else None."""
        return self._server.exit_code

    def join(self, timeout=None):
        """Waits until the task ends (at most ``timeout`` seconds if given) and returns its exit
        code, or None if it is still running. Ctrl-C raises KeyboardInterrupt; a chief then asks
        the job to stop (every task is shut down and told the job failed)."""
        try:
            return self._server.join(timeout)
        except KeyboardInterrupt:
            if self.job == "chief" and self.exit_code is None:
                self.stop("KeyboardInterrupt")
            raise

    def stop(self, reason="stopped from Python"):
        """A chief: asks the running job to stop (it ends failed, saying ``reason``). Any later
        chief of this process stops at once too."""
        if self.job != "chief":
            raise errors.FailedPreconditionError("Server.stop: only a chief stops the job")
        _pstrain._request_job_stop(reason)

    def __repr__(self):
        return "<pstrain.Server %s:%d %s>" % (
            self.job, self.task, "running" if self.exit_code is None else
            "exit code %d" % self.exit_code)
