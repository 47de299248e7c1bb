"""Clusters of real pstrain processes on 127.0.0.1 for pytest, as tests/external_cluster.h is
for the C++ tests: PS tasks and a chief (``pstrain server --job chief --model external``) of
$PSTRAIN_BINARY on free ports, and worker addresses for Client scripts (subprocesses started
with :meth:`Cluster.start_worker`, or Clients in the test's own process via
:meth:`Cluster.connect`).

Every process started gets PSTRAIN_TEST_TAG in its environment and a session of its own; the
``make_cluster`` fixture kills all of them (and anything else carrying the tag) at the end of
the test, whether it passed or not. Import it into a test file with::

    sys.path.insert(0, os.path.dirname(__file__))
    from pstrain_pytest_cluster import Cluster, make_cluster  # noqa: F401 (a fixture)
"""

import json
import os
import signal
import socket
import subprocess
import time
import uuid

import pytest

BINARY = os.environ.get("PSTRAIN_BINARY", "")
PYTHON = "/usr/bin/python3"


def free_ports(n):
    """n distinct ports free on 127.0.0.1 (held together while chosen, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def flag_args(flags):
    """{"mode": "sync", "lr": 1} -> ["--mode=sync", "--lr=1"]; a list or tuple is passed on."""
    if isinstance(flags, (list, tuple)):
        return [str(f) for f in flags]
    args = []
    for name, value in flags.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            value = ",".join(str(v) for v in value)
        args.append("--%s=%s" % (name, value))
    return args


def tagged_pids(tag):
    """Processes alive (not zombies) whose environment holds PSTRAIN_TEST_TAG=tag."""
    needle = ("PSTRAIN_TEST_TAG=%s" % tag).encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % name, "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open("/proc/%s/stat" % name) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(name))
    return found


class Process:
    """A started process: its Popen and the files its stdout and stderr go to."""

    def __init__(self, name, argv, env, log_dir):
        self.name = name
        self.out_path = os.path.join(log_dir, name + ".out")
        self.err_path = os.path.join(log_dir, name + ".err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.popen = subprocess.Popen(argv, env=env, stdout=out, stderr=err,
                                          stdin=subprocess.DEVNULL, start_new_session=True)

    def wait(self, timeout):
        """The exit code, or pytest.fail with the output if it runs past `timeout` seconds."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail("%s still running after %ss\n%s" % (self.name, timeout, self.output()))

    @property
    def stdout(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()

    @property
    def stderr(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def output(self):
        return "--- %s stdout:\n%s--- %s stderr:\n%s" % (self.name, self.stdout, self.name,
                                                         self.stderr)

    def kill(self):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait()


class Cluster:
    """A chief, ``num_ps`` PS tasks and ``num_workers`` worker addresses on 127.0.0.1."""

    def __init__(self, log_dir, num_ps=1, num_workers=1, binary=BINARY):
        if not binary or not os.path.exists(binary):
            pytest.fail("PSTRAIN_BINARY=%r is not a built pstrain binary" % binary)
        self.binary, self.log_dir = binary, str(log_dir)
        self.tag = uuid.uuid4().hex
        ports = free_ports(1 + num_ps + num_workers)
        addresses = ["127.0.0.1:%d" % p for p in ports]
        self.spec = {"chief": addresses[:1], "ps": addresses[1:1 + num_ps],
                     "worker": addresses[1 + num_ps:]}
        self.processes = []
        self.chief = None
        self.ps = []

    @property
    def chief_address(self):
        return self.spec["chief"][0]

    def tf_config(self, job, index):
        return json.dumps({"cluster": self.spec, "task": {"type": job, "index": index}})

    def env(self, job, index, extra=None):
        """The environment of task `index` of `job`: this one's, TF_CONFIG and the tag."""
        env = dict(os.environ, TF_CONFIG=self.tf_config(job, index), PSTRAIN_TEST_TAG=self.tag)
        env.update(extra or {})
        return env

    def start_process(self, name, argv, env):
        p = Process(name, argv, env, self.log_dir)
        self.processes.append(p)
        return p

    def start(self, chief_flags=(), start_chief=True, start_ps=True):
        """Starts the PS tasks and then the chief with `chief_flags` (a dict or a list), and
        waits until the chief accepts connections (or has exited: its own error then shows)."""
        if start_ps:
            for i in range(len(self.spec["ps"])):
                self.ps.append(self.start_process(
                    "ps%d" % i, [self.binary, "server", "--connect_timeout", "60",
                                 "--log_level", "warn"], self.env("ps", i)))
        if start_chief:
            argv = [self.binary, "server", "--job", "chief", "--model", "external",
                    "--connect_timeout", "60"] + flag_args(chief_flags)
            self.chief = self.start_process("chief", argv, self.env("chief", 0))
            self.wait_listening(self.chief, self.chief_address)
        return self

    @staticmethod
    def wait_listening(process, address, timeout=60):
        """Returns once `address` accepts a TCP connection or `process` has exited. A client
        that connects before its chief listens works too, but gRPC may then wait seconds
        before its next attempt: tests connect once the chief is there."""
        host, port = address.rsplit(":", 1)

        def accepts():
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return True
            except OSError:
                return False

        wait_for(lambda: process.popen.poll() is not None or accepts(), timeout,
                 "%s to listen on %s" % (process.name, address))

    def start_worker(self, index, argv, extra_env=None):
        """Runs `argv` (e.g. [PYTHON, script]) as worker `index`, TF_CONFIG set."""
        return self.start_process("worker%d" % index, argv,
                                  self.env("worker", index, extra_env))

    def connect(self, task=0, timeout=60.0, **options):
        """A Client of this process as worker `task` (options: Client.connect's others)."""
        import pstrain
        return pstrain.Client.connect(chief=self.chief_address, task=task, timeout=timeout,
                                      **options)

    def finish(self, timeout=60):
        """Waits for the chief and the PS to end; the chief's result line as a dict."""
        code = self.chief.wait(timeout)
        assert code == 0, "chief exit code %d\n%s" % (code, self.chief.output())
        for p in self.ps:
            assert p.wait(30) == 0, p.output()
        lines = [l for l in self.chief.stdout.splitlines() if l.startswith("{")]
        assert lines, "no result line\n" + self.chief.output()
        return json.loads(lines[-1])

    def output(self):
        """Every process's output, for failure messages."""
        return "\n".join(p.output() for p in self.processes)

    def kill_all(self):
        for p in self.processes:
            p.kill()
        for pid in tagged_pids(self.tag):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def all_ended(self):
        return not tagged_pids(self.tag)


@pytest.fixture
def make_cluster(tmp_path):
    """make_cluster(num_ps=1, num_workers=1, chief_flags=(), start=True) -> a started Cluster;
    every process of every cluster made is killed when the test ends."""
    clusters = []

    def make(num_ps=1, num_workers=1, chief_flags=(), start=True):
        c = Cluster(tmp_path / ("cluster%d" % len(clusters)), num_ps, num_workers)
        os.makedirs(c.log_dir, exist_ok=True)
        clusters.append(c)
        return c.start(chief_flags) if start else c

    yield make
    for c in clusters:
        c.kill_all()


def run_python(code, env, timeout=60):
    """Runs `code` in a fresh /usr/bin/python3 with `env`; the CompletedProcess."""
    return subprocess.run([PYTHON, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)


def wait_for(predicate, timeout, what):
    """Polls `predicate` every 20 ms until true, or fails the test after `timeout` seconds."""
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            pytest.fail("timed out after %ss waiting for %s" % (timeout, what))
        time.sleep(0.02)


def interrupt(process, within=1.5):
    """Sends SIGINT to `process` (a Process running a Python script) and checks that the script
    raised KeyboardInterrupt within `within` seconds (calls wait in 50 ms slices; the margin is
    for a loaded machine)."""
    os.kill(process.popen.pid, signal.SIGINT)
    sent = time.monotonic()
    wait_for(lambda: "KeyboardInterrupt" in process.stdout or process.popen.poll() is not None,
             10, "KeyboardInterrupt\n" + process.output())
    assert time.monotonic() - sent < within, process.output()


__all__ = ["BINARY", "PYTHON", "Cluster", "Process", "free_ports", "flag_args", "interrupt",
           "make_cluster", "run_python", "tagged_pids", "wait_for"]
