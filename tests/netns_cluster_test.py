"""A multi-host run on one machine: chief, 2 PS and 2 workers, each `pstrain server` in a network
namespace of its own with its own address (10.199.0.1-5/24 on veth pairs joined by a bridge in
one more namespace), the cluster in TF_CONFIG naming those addresses, a job token on every task.
The MNIST MLP trains to test accuracy >= 0.9, also when a PS and a worker are killed and
started again on their addresses, as pods restarted by Kubernetes are.

It needs root (ip netns); a namespace that cannot be made fails the test. The namespaces carry
this process's PID in their names, so runs side by side do not clash, and they are deleted (and
every process killed) however the test ends; those of a run that was killed outright are deleted
by the next one.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import BINARY, Process, tagged_pids  # noqa: E402

SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
TASKS = [("chief", 0), ("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]
PORT = 2222
TARGET = 0.9
TIMEOUT_S = 120


def ip(*args):
    """Runs `ip ARGS`; a failure fails the test with ip's own message."""
    r = subprocess.run(["ip"] + list(args), capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail("ip %s failed (%d): %s" % (" ".join(args), r.returncode, r.stderr.strip()))


class Network:
    """A bridge namespace and one namespace per task, each with eth0 on the bridge."""

    def __init__(self):
        self.prefix = "pstrain%d" % os.getpid()
        self.bridge_ns = self.prefix + "-br"
        self.made = []

    def namespace(self, job, index):
        return "%s-%s%d" % (self.prefix, job, index)

    def add_namespace(self, name):
        ip("netns", "add", name)
        self.made.append(name)
        ip("-n", name, "link", "set", "lo", "up")

    @staticmethod
    def delete_stale():
        """Deletes the namespaces of runs whose process is gone (killed before cleaning up)."""
        r = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
        for line in r.stdout.splitlines():
            m = re.match(r"pstrain(\d+)-\S+", line)
            if m and not os.path.exists("/proc/" + m.group(1)):
                subprocess.run(["ip", "netns", "del", m.group(0)], capture_output=True)

    def build(self):
        self.delete_stale()
        self.add_namespace(self.bridge_ns)
        ip("-n", self.bridge_ns, "link", "add", "br0", "type", "bridge")
        ip("-n", self.bridge_ns, "link", "set", "br0", "up")
        addresses = []
        for i, (job, index) in enumerate(TASKS):
            ns = self.namespace(job, index)
            self.add_namespace(ns)
            # Both ends are made in the bridge namespace (so their names cannot clash with
            # another run's) and one moves into the task's namespace as eth0.
            port = "veth%d" % i
            ip("-n", self.bridge_ns, "link", "add", port, "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            ip("-n", self.bridge_ns, "link", "set", port, "master", "br0", "up")
            address = "10.199.0.%d" % (i + 1)
            ip("-n", ns, "addr", "add", address + "/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            addresses.append(address)
        return addresses

    def delete(self):
        for name in reversed(self.made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self.made = []


@pytest.fixture
def network():
    # ctest's timeout sends SIGTERM: turn it into an exception so the cleanup below runs.
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    net = Network()
    try:
        yield net
    finally:
        net.delete()
        signal.signal(signal.SIGTERM, previous)


class Cluster:
    """The five tasks, each `pstrain server` in its namespace under one job token; a task is
    started again on its own address as a pod restart would start it."""

    def __init__(self, network, tmp_path, chief_flags):
        assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
        self.network, self.tmp_path, self.chief_flags = network, tmp_path, chief_flags
        addresses = network.build()
        self.spec = {"chief": [], "ps": [], "worker": []}
        for (job, _), address in zip(TASKS, addresses):
            self.spec[job].append("%s:%d" % (address, PORT))
        self.token = tmp_path / "token"
        self.token.write_text("netns-test-token-%d\n" % os.getpid())
        self.token.chmod(0o600)
        self.tag = "netns-%d" % os.getpid()
        self.processes = {}  # (job, index) -> the running Process
        self.all = []
        for job, index in TASKS:
            self.start(job, index)

    def start(self, job, index):
        env = dict(os.environ, PSTRAIN_TEST_TAG=self.tag, TF_CONFIG=json.dumps(
            {"cluster": self.spec, "task": {"type": job, "index": index}}))
        argv = ["ip", "netns", "exec", self.network.namespace(job, index), BINARY, "server",
                "--auth_token_file", str(self.token), "--connect_timeout", "60"]
        if job == "chief":
            argv += self.chief_flags
        runs = sum(1 for p in self.all if p.name.startswith("%s%d" % (job, index)))
        p = Process("%s%d%s" % (job, index, "" if runs == 0 else "-run%d" % runs), argv, env,
                    str(self.tmp_path))
        self.processes[(job, index)] = p
        self.all.append(p)
        return p

    def output(self):
        return "\n".join(p.output() for p in self.all)

    def result(self):
        """The chief's result line, once every task exited 0."""
        chief = self.processes[("chief", 0)]
        code = chief.wait(TIMEOUT_S)
        assert code == 0, "chief exited %d\n%s" % (code, self.output())
        for key, p in self.processes.items():
            assert p.wait(30) == 0, "%s did not exit 0\n%s" % (p.name, self.output())
        results = [l for l in chief.stdout.splitlines() if l.startswith("{")]
        assert results, "no result line\n" + self.output()
        return json.loads(results[-1])

    def stop(self):
        for p in self.all:
            p.kill()
        for pid in tagged_pids(self.tag):
            os.kill(pid, signal.SIGKILL)


def wait_for(condition, what, cluster):
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail("no %s after %ds\n%s" % (what, TIMEOUT_S, cluster.output()))
        time.sleep(0.05)


def mnist():
    data = os.path.join(SOURCE_DIR, "data", "mnist")
    assert os.path.isdir(data), "run scripts/setup.sh (no %s)" % data
    return data


def test_five_namespaces_train_mnist(network, tmp_path):
    cluster = Cluster(network, tmp_path, ["--data", mnist(), "--epochs", "1", "--hidden", "64",
                                          "--batch", "64", "--optimizer", "adam", "--lr",
                                          "0.001"])
    try:
        result = cluster.result()
        print("netns job: test_accuracy %.4f in %.1fs" % (result["test_accuracy"],
                                                          result["seconds"]))
        assert result["test_accuracy"] >= TARGET, result
        assert result["ps"] == 2 and result["workers"] == 2, result
        assert all(s > 0 for s in result["worker_steps"]), result
        # Each task served on its own namespace's address, not on 127.0.0.1.
        for (job, index), p in cluster.processes.items():
            address = cluster.spec[job][index]
            assert "serving on %s" % address in p.stderr or job == "chief", p.output()
    finally:
        cluster.stop()


def test_a_ps_and_a_worker_killed_and_started_again_on_their_hosts(network, tmp_path):
    """What a pod restart does on Kubernetes (deploy/kubernetes): the chief, started with
    --resume on a directory every PS writes, rolls the job back to its checkpoint when ps:1
    comes back, and hands worker:1's task out again when it does; every task is applied once."""
    ckpt = tmp_path / "checkpoints"
    cluster = Cluster(network, tmp_path, [
        "--data", mnist(), "--epochs", "3", "--hidden", "64", "--batch", "64", "--optimizer",
        "adam", "--lr", "0.001", "--resume", str(ckpt), "--checkpoint_every_steps", "200"])
    chief = cluster.processes[("chief", 0)]
    try:
        wait_for(lambda: glob.glob(str(ckpt / "ckpt-*" / "manifest.json")), "first checkpoint",
                 cluster)
        cluster.processes[("ps", 1)].kill()
        cluster.start("ps", 1)
        wait_for(lambda: "generation 2 started" in chief.stderr, "rollback", cluster)
        cluster.processes[("worker", 1)].kill()
        cluster.start("worker", 1)
        result = cluster.result()
        print("netns job with restarts: test_accuracy %.4f, rollbacks %d, workers replaced %d"
              % (result["test_accuracy"], result["rollbacks"], result["workers_replaced"]))
        assert result["tasks_applied_once"] is True, result
        assert result["rollbacks"] == 1 and result["failures_survived"] >= 2, result
        assert result["test_accuracy"] >= TARGET, result
        assert "ps:1 restarted" in chief.stderr, chief.stderr
    finally:
        cluster.stop()
