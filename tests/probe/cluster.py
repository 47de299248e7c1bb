"""A real cluster on 127.0.0.1 in which the probe plays worker 0 through Python gRPC.

chief (`--model external --mode async`), one ps and worker 1 are `pstrain server` processes; the
probe registers as worker 0 with its own incarnation, creates variables through the chief and
pulls them as any client program would. At the end worker 1 is started on a one-step job (as the
chief would start it), the probe meets the chief at a barrier, leaves and reports done, and every
process must exit 0 by itself.
"""

import json
import os
import random
import resource
import signal
import socket
import struct
import subprocess
import time

import grpc

from probe import wire
from probe.wire import pb

# An allocation this large fails inside the server rather than taking the test machine's memory:
# no request to this small cluster needs more, so a server that dies on it was asked to allocate
# without bound.
ADDRESS_SPACE_LIMIT = 6 << 30

BIG_ELEMENTS = 16 << 20  # a 64 MB float variable
MAX_TABLE_DIM = 65536  # kMaxTableDim: 2,000 rows of the widest table pass a reply's limit
TABLES = {"probe/emb": 4, "probe/wide": MAX_TABLE_DIM}  # name -> dim
TABLE_KEYS = (1, 2, 3)  # keys with rows in every table, looked up by create_standard_tables
START_BARRIER = "pstrain/start"
END_BARRIER = "probe/end"


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def tagged_processes(tag):
    """Live processes whose environment carries `tag` (every process a cluster started does)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if tag.encode() not in f.read():
                    continue
            with open("/proc/%s/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append(int(pid))
    return found


def _limit_memory():
    # An AddressSanitizer build (make test-sanitize sets ASAN_OPTIONS) reserves terabytes of
    # address space for its shadow memory at start, which any such limit refuses.
    if "ASAN_OPTIONS" in os.environ:
        return
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))


class Task:
    def __init__(self, name, argv, env, log_dir):
        self.name = name
        self.out_path = os.path.join(log_dir, name.replace(":", "") + ".out")
        self.err_path = os.path.join(log_dir, name.replace(":", "") + ".err")
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, preexec_fn=_limit_memory,
                                         start_new_session=True)

    def running(self):
        return self.proc.poll() is None

    def describe_exit(self):
        rc = self.proc.poll()
        how = "running" if rc is None else (
            "killed by signal %d" % -rc if rc < 0 else "exited with code %d" % rc)
        return "%s %s; stderr ends: %s" % (self.name, how, self.stderr_tail())

    def stderr_tail(self, n=600):
        with open(self.err_path, errors="replace") as f:
            return f.read()[-n:].strip()

    def stdout(self):
        with open(self.out_path, errors="replace") as f:
            return f.read()


class ServerDied(AssertionError):
    pass


def run_checks(cluster, problems, body, about=""):
    """Runs the probe `body`; unless a server died in it, ends the job with `cluster.finish`.

    Fails with every problem found (`about` says how to repeat the run).
    """
    try:
        body()
    except ServerDied as e:
        problems.append("a server died: %s" % e)
    else:
        cluster.finish(problems)
    assert not problems, "%d problem(s)%s:\n  %s" % (len(problems), about,
                                                     "\n  ".join(problems))


class Cluster:
    def __init__(self, tmp_dir, binary, source_dir):
        self.tmp_dir, self.binary = tmp_dir, binary
        self.data_dir = os.path.join(source_dir, "data", "mnist")
        self.tag = "PSTRAIN_PROBE_TAG=%d-%d" % (os.getpid(), random.getrandbits(32))
        ports = free_ports(4)
        self.addr = {k: "127.0.0.1:%d" % p
                     for k, p in zip(("chief", "ps:0", "worker:0", "worker:1"), ports)}
        self.tasks = {}
        self.incarnation = random.SystemRandom().getrandbits(63) | 1
        self.me = wire.sender("worker", 0, self.incarnation)
        self.chief_incarnation = 0
        self.placements = {}  # variable name -> Placement
        self.table_rows = None  # {table: (version, rows of TABLE_KEYS)} once tables exist
        self.reported_steps = 0
        self.result = None  # the chief's result line, once the job ended

    # --- processes -------------------------------------------------------------------------

    def start(self, flags=None):
        """Starts chief, ps:0 and worker:1; `flags` maps a task's name to flags of its own."""
        flags = flags or {}
        cluster = {"cluster": {"chief": [self.addr["chief"]], "ps": [self.addr["ps:0"]],
                               "worker": [self.addr["worker:0"], self.addr["worker:1"]]}}
        path = os.path.join(self.tmp_dir, "cluster.json")
        with open(path, "w") as f:
            json.dump(cluster, f)
        env = dict(os.environ)
        env["PSTRAIN_PROBE_TAG"] = self.tag.split("=", 1)[1]
        common = [self.binary, "server", "--cluster", path, "--connect_timeout", "60"]
        self.tasks["chief"] = Task("chief", common + [
            "--job", "chief", "--model", "external", "--mode", "async", "--task_timeout", "900"]
            + flags.get("chief", []), env, self.tmp_dir)
        self.tasks["ps:0"] = Task("ps:0", common + ["--job", "ps", "--task", "0"]
                                  + flags.get("ps:0", []), env, self.tmp_dir)
        self.tasks["worker:1"] = Task("worker:1", common + ["--job", "worker", "--task", "1"]
                                      + flags.get("worker:1", []), env, self.tmp_dir)
        self.master = wire.Peer(self.addr["chief"], "pstrain.MasterService")
        self.ps = wire.Peer(self.addr["ps:0"], "pstrain.ParameterServerService")
        self.worker = wire.Peer(self.addr["worker:1"], "pstrain.WorkerService")
        self.peers = {"pstrain.MasterService": self.master,
                      "pstrain.ParameterServerService": self.ps,
                      "pstrain.WorkerService": self.worker}

    def check_stays_alive(self, after, seconds=3.0):
        """Like check_alive, for a request that would stop a server a moment after its reply."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.check_alive(after)
            time.sleep(0.1)
        self.check_alive(after)

    def check_alive(self, after):
        """Raises ServerDied naming `after` if any server process has exited."""
        dead = [t.describe_exit() for t in self.tasks.values() if not t.running()]
        if dead:
            raise ServerDied("after %s: %s" % (after, " | ".join(dead)))

    def kill_all(self):
        for t in self.tasks.values():
            if t.running():
                t.proc.kill()
            t.proc.wait()
        for pid in tagged_processes(self.tag):
            os.kill(pid, signal.SIGKILL)
        for p in getattr(self, "peers", {}).values():
            p.close()

    # --- the probe as worker 0 -------------------------------------------------------------

    def chief_sender(self):
        return wire.sender("chief", 0, self.chief_incarnation)

    def register(self, timeout=60):
        """Registers as worker 0, retrying while the chief is not up yet."""
        req = pb("RegisterRequest")(sender=self.me, address=self.addr["worker:0"])
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive("Register as worker 0")
            out = self.master.call("Register", req, timeout=max(1.0, deadline - time.monotonic()))
            if out.ok:
                self.chief_incarnation = out.response.chief_incarnation
                return out.response
            if out.code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise AssertionError("Register as worker 0: %r" % out)
            time.sleep(0.2)

    def wait_configured(self, timeout=60):
        """Waits until the chief configured the PS for the job's two workers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive("waiting for the chief to configure ps:0")
            out = self.ps.call("Stats", pb("StatsRequest")(sender=self.chief_sender()))
            if out.ok and len(out.response.pushes_by_worker) == 2:
                return
            time.sleep(0.2)
        raise AssertionError("ps:0 was not configured for 2 workers within %ds" % timeout)

    def create_variable(self, name, shape, kind="zeros", partitioner="", timeout=60, **init):
        """Creates (get-or-create) a variable through the chief, retrying while the chief is not
        ready to create variables yet."""
        spec = pb("VariableSpec")(name=name, shape=shape, partitioner=partitioner)
        spec.initializer.kind = kind
        for k, v in init.items():
            setattr(spec.initializer, k, v)
        spec.optimizer.name = "sgd"
        spec.optimizer.learning_rate = 0.1
        req = pb("CreateVariableRequest")(sender=self.me, spec=spec)
        deadline = time.monotonic() + timeout
        while True:
            out = self.master.call("CreateVariable", req, timeout=60)
            self.check_alive("CreateVariable %r" % name)
            if out.ok:
                self.placements[name] = out.response.placement
                return out.response.placement
            # UNAVAILABLE: the chief is not ready yet (it creates nothing before its start).
            if out.code != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise AssertionError("CreateVariable %r: %r" % (name, out))
            time.sleep(0.2)

    def create_standard_variables(self):
        """A softmax layer worker 1 can train (MNIST, 784 -> 10), a small variable and a 64 MB one."""
        self.create_variable("dense0/kernel", [784, 10], "glorot_uniform", seed=7)
        self.create_variable("dense0/bias", [10])
        self.create_variable("probe/small", [3, 2], "constant", value=1.5)
        self.create_variable("probe/big", [BIG_ELEMENTS], "uniform", low=-1, high=1, seed=3)

    def create_standard_tables(self):
        """Embedding tables on ps:0, created as the chief's table creator would (CreateTables from
        the chief), with rows for TABLE_KEYS."""
        req = pb("CreateTablesRequest")(sender=self.chief_sender())
        for name, dim in TABLES.items():
            t = req.tables.add(name=name, dim=dim)
            t.initializer.kind, t.initializer.low, t.initializer.high = "uniform", -1, 1
            t.optimizer.name, t.optimizer.learning_rate = "sgd", 0.1
        out = self.ps.call("CreateTables", req)
        if not out.ok:
            raise AssertionError("CreateTables: %r" % out)
        return self.lookup()

    def lookup(self, keys=TABLE_KEYS):
        """Looks up `keys` in every table as the legitimate worker 0: {table: (version, rows)}."""
        packed = struct.pack("<%dQ" % len(keys), *keys)
        req = pb("LookupRequest")(sender=self.me, tables=[
            pb("TableKeys")(table=name, keys=packed) for name in TABLES])
        out = self.ps.call("Lookup", req, timeout=120)
        if out.code == grpc.StatusCode.UNAVAILABLE:
            self.check_alive("a legitimate Lookup")
            raise ServerDied("ps:0 no longer serves a legitimate Lookup: %r" % out)
        if not out.ok:
            raise AssertionError("legitimate Lookup of %s: %r" % (keys, out))
        return {name: (t.version, t.rows) for name, t in zip(TABLES, out.response.tables)}

    def shard_names(self):
        return [s.name for p in self.placements.values() for s in p.shards]

    def pull(self, names=None):
        """Pulls as the legitimate worker 0: {shard name: (version, dtype, shape, bytes)}."""
        names = list(names or self.shard_names())
        out = self.ps.call("Pull", pb("PullRequest")(sender=self.me, names=names), timeout=120)
        if out.code == grpc.StatusCode.UNAVAILABLE:
            self.check_alive("a legitimate Pull")
            raise ServerDied("ps:0 no longer serves a legitimate Pull: %r" % out)
        if not out.ok:
            raise AssertionError("legitimate Pull of %s: %r" % (names, out))
        return {v.name: (v.version, v.value.dtype, tuple(v.value.shape), v.value.data)
                for v in out.response.values}

    def stats(self):
        out = self.ps.call("Stats", pb("StatsRequest")(sender=self.chief_sender()))
        if not out.ok:
            raise AssertionError("Stats: %r" % out)
        return out.response

    def report(self, done=False):
        req = pb("ProgressRequest")(sender=self.me, steps=self.reported_steps, done=done)
        return self.master.call("ReportProgress", req)

    # --- the end of the job ----------------------------------------------------------------

    def training_spec(self):
        """One step of a softmax regression on worker 1's half of MNIST."""
        model = pb("ModelSpec")(kind="mlp", dense_features=784, num_classes=10)
        spec = pb("TrainingSpec")(
            data=self.data_dir, train_records=60000, model=model, shard_index=1, num_shards=2,
            batch_size=30000, epochs=1, seed=1, report_every=1, rpc_timeout_s=60, mode="async")
        for name in ("dense0/kernel", "dense0/bias"):
            spec.placement.append(self.placements[name])
        return spec

    def start_worker1(self):
        """Starts worker 1 on the training spec, as the chief starts a worker."""
        req = pb("StartTrainingRequest")(sender=self.chief_sender(), spec=self.training_spec())
        return self.worker.call("StartTraining", req, timeout=60)

    def finish(self, problems):
        """Ends the job the legitimate way and checks every process exits 0 with the result.

        Appends what went wrong to `problems`; if the job cannot end, the chief is sent SIGTERM
        (which must end the job) and what is left is killed.
        """
        def expect(what, out):
            if not out.ok:
                problems.append("end of job: %s: %r" % (what, out))
            return out.ok

        started = expect("legitimate StartTraining of worker 1", self.start_worker1())
        if started:  # worker 1 pushes one step, leaves and reports done
            self._wait(lambda: self.stats().pushes_by_worker[1] >= 1, 90,
                       "worker 1's push", problems)
        expect("Barrier %r once worker 1 is done" % END_BARRIER,
               self.master.call("Barrier", pb("BarrierRequest")(sender=self.me, name=END_BARRIER),
                                timeout=20))
        expect("Leave", self.ps.call("Leave", pb("LeaveRequest")(sender=self.me)))
        expect("ReportProgress done", self.report(done=True))
        exits = self._wait_exit(60)
        if exits is None:
            problems.append("end of job: still running 60 s after the last worker was done: %s"
                            % [t.name for t in self.tasks.values() if t.running()])
            self.tasks["chief"].proc.send_signal(signal.SIGTERM)
            if self._wait_exit(30) is None:
                problems.append("still running 30 s after SIGTERM to the chief: %s"
                                % [t.name for t in self.tasks.values() if t.running()])
        else:
            for t in self.tasks.values():
                if t.proc.returncode != 0:
                    problems.append("end of job: %s" % t.describe_exit())
            lines = [l for l in self.tasks["chief"].stdout().splitlines() if l.startswith("{")]
            if not lines:
                problems.append("end of job: the chief printed no result line")
            else:
                self.result = json.loads(lines[-1])
        if any(p.startswith("end of job") for p in problems):
            with open(self.tasks["chief"].err_path, errors="replace") as f:
                said = [l for l in f if not l.startswith(("progress ", "[libprotobuf"))]
            problems.append("the chief said: %s%s" % ("".join(said[-6:]),
                                                      self.tasks["chief"].stdout()))
        self.kill_all()
        left = tagged_processes(self.tag)
        if left:
            problems.append("processes left running: %s" % left)

    def _wait(self, cond, timeout, what, problems):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if cond():
                    return True
            except AssertionError as e:
                problems.append("end of job: waiting for %s: %s" % (what, e))
                return False
            time.sleep(0.2)
        problems.append("end of job: no %s within %ds" % (what, timeout))
        return False

    def _wait_exit(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not any(t.running() for t in self.tasks.values()):
                return {n: t.proc.returncode for n, t in self.tasks.items()}
            time.sleep(0.2)
        return None
