"""A multi-host run on one machine: chief, 2 PS and 2 workers, each `pstrain server` in a network
namespace of its own with its own address (10.199.0.1-5/24 on veth pairs joined by a bridge in
one more namespace), the cluster in TF_CONFIG naming those addresses, a job token on every task.
The MNIST MLP trains to test accuracy >= 0.9.

It needs root (ip netns); a namespace that cannot be made fails the test. The namespaces carry
this process's PID in their names, so runs side by side do not clash, and they are deleted (and
every process killed) however the test ends; those of a run that was killed outright are deleted
by the next one.
"""

import json
import os
import re
import signal
import subprocess
import sys

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


def test_five_namespaces_train_mnist(network, tmp_path):
    assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
    data = os.path.join(SOURCE_DIR, "data", "mnist")
    assert os.path.isdir(data), "run scripts/setup.sh (no %s)" % data
    addresses = network.build()
    spec = {"chief": [], "ps": [], "worker": []}
    for (job, _), address in zip(TASKS, addresses):
        spec[job].append("%s:%d" % (address, PORT))
    token = tmp_path / "token"
    token.write_text("netns-test-token-%d\n" % os.getpid())
    token.chmod(0o600)
    tag = "netns-%d" % os.getpid()
    processes = []
    try:
        for job, index in TASKS:
            env = dict(os.environ, PSTRAIN_TEST_TAG=tag, TF_CONFIG=json.dumps(
                {"cluster": spec, "task": {"type": job, "index": index}}))
            argv = ["ip", "netns", "exec", network.namespace(job, index), BINARY, "server",
                    "--auth_token_file", str(token), "--connect_timeout", "60"]
            if job == "chief":
                argv += ["--data", data, "--epochs", "1", "--hidden", "64", "--batch", "64",
                         "--optimizer", "adam", "--lr", "0.001"]
            processes.append(Process("%s%d" % (job, index), argv, env, str(tmp_path)))
        chief = processes[0]
        code = chief.wait(TIMEOUT_S)
        everything = "\n".join(p.output() for p in processes)
        assert code == 0, "chief exited %d\n%s" % (code, everything)
        for p in processes[1:]:
            assert p.wait(30) == 0, "%s did not exit 0\n%s" % (p.name, everything)
        results = [l for l in chief.stdout.splitlines() if l.startswith("{")]
        assert results, "no result line\n" + everything
        result = json.loads(results[-1])
        print("netns job: test_accuracy %.4f in %.1fs" % (result["test_accuracy"],
                                                          result["seconds"]))
        assert result["test_accuracy"] >= TARGET, result
        assert result["ps"] == 2 and result["workers"] == 2, result
        assert all(s > 0 for s in result["worker_steps"]), result
        # Each task served on its own namespace's address, not on 127.0.0.1.
        for p, (job, index) in zip(processes, TASKS):
            address = spec[job][index]
            assert "serving on %s" % address in p.stderr or job == "chief", p.output()
    finally:
        for p in processes:
            p.kill()
        for pid in tagged_pids(tag):
            os.kill(pid, signal.SIGKILL)
