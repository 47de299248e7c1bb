"""The three services probed from outside, as anyone who can reach a port may do.

A Python gRPC client (messages generated from proto/ in the test) plays worker 0 of a real cluster
(see probe/cluster.py) and sends the oversized, overflowing and misattributed requests of issue 6,
then 1,000 seeded random payloads to every method. No server may die, every call must end with a
documented status and a message, and the variables and embedding tables must keep the bytes the
legitimate worker pulled and looked up before. PSTRAIN_PROBE_SEED picks the random payloads
(printed on failure).
"""

import math
import os
import random
import struct
import tempfile

import grpc
import pytest

from probe import payloads, wire
from probe.cluster import BIG_ELEMENTS, END_BARRIER, TABLE_KEYS, TABLES, Cluster, ServerDied
from probe.wire import REFUSALS, pb

SEED = int(os.environ.get("PSTRAIN_PROBE_SEED", "20240606"))
# 300 per method in the suite (about 11,000 requests over the three services); a deeper run sets
# PSTRAIN_PROBE_PAYLOADS (and PSTRAIN_PROBE_SEED for other bytes).
PAYLOADS_PER_METHOD = int(os.environ.get("PSTRAIN_PROBE_PAYLOADS", "300"))
BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
GARBAGE = b"\xff\xff\xff\xff\x0f"  # a field tag past the largest field number: never parses

C = grpc.StatusCode
SIZE_REFUSALS = {C.INVALID_ARGUMENT, C.RESOURCE_EXHAUSTED}
SENDER_REFUSALS = {C.PERMISSION_DENIED, C.FAILED_PRECONDITION, C.UNAUTHENTICATED}
REREGISTER_REFUSALS = SENDER_REFUSALS | {C.ALREADY_EXISTS, C.ABORTED}


@pytest.fixture
def cluster():
    if not BINARY or not os.path.exists(BINARY):
        pytest.fail("PSTRAIN_BINARY=%r is not a built pstrain binary" % BINARY)
    with tempfile.TemporaryDirectory(prefix="pstrain-probe-") as tmp:
        c = Cluster(tmp, BINARY, SOURCE_DIR)
        c.start()
        try:
            yield c
        finally:
            c.kill_all()


class Probe:
    """Sends cases and collects every problem, so one run lists all of them."""

    def __init__(self, cluster):
        self.c, self.problems = cluster, []

    def expect(self, what, out, codes, contains=None, lacks=None):
        if out.code not in codes:
            self.problems.append("%s: got %r, expected one of %s"
                                 % (what, out, sorted(c.name for c in codes)))
        elif not out.ok and not out.details.strip():
            self.problems.append("%s: %s with an empty message" % (what, out.code.name))
        elif contains and contains not in out.details:
            self.problems.append("%s: message %r does not mention %r" % (what, out.details,
                                                                         contains))
        elif lacks and lacks in out.details:
            self.problems.append("%s: message %r says %r" % (what, out.details, lacks))
        self.c.check_alive(what)
        return out

    def expect_unchanged(self, before, what="the variables"):
        """The variables in `before` and, once created, the tables' rows are as they were."""
        if self.c.table_rows is not None:
            after = self.c.lookup()
            for name, (version, rows) in self.c.table_rows.items():
                got = after.get(name)
                if got != (version, rows):
                    self.problems.append("%s: table %r changed: version %s -> %s, %s" % (
                        what, name, version, got and got[0],
                        "same rows" if got and got[1] == rows else "rows differ"))
        after = self.c.pull(before.keys())
        for name, value in before.items():
            if after.get(name) != value:
                got = after.get(name)
                self.problems.append(
                    "%s: %r changed: version %s -> %s, %s" % (
                        what, name, value[0], got and got[0],
                        "same bytes" if got and got[3] == value[3] else "bytes differ"))

    def run(self, body, finish=True, before_assert=lambda: None):
        """Runs `body`, then ends the job; fails listing every problem seen."""
        try:
            body()
        except ServerDied as e:
            self.problems.append("a server died: %s" % e)
            finish = False
        finally:
            before_assert()
        if finish:
            self.c.finish(self.problems)
        assert not self.problems, "%d problem(s) (PSTRAIN_PROBE_SEED=%d):\n  %s" % (
            len(self.problems), SEED, "\n  ".join(self.problems))


def ready(c, variables=True):
    """Registers and, with `variables`, creates the standard variables and tables; returns the
    variables as pulled (the tables' rows are kept in c.table_rows)."""
    c.register()
    c.wait_configured()
    if variables:
        c.create_standard_variables()
        c.table_rows = c.create_standard_tables()
        return c.pull()
    return None


def tensor(shape, data, dtype=1):
    return pb("TensorProto")(dtype=dtype, shape=shape, data=data)


def floats(*xs):
    return struct.pack("<%df" % len(xs), *xs)


def send_garbage(probe, peer):
    for method, _, _ in wire.methods(peer.service):
        probe.expect("%s %s with bytes that do not parse" % (peer.service, method),
                     peer.call(method, GARBAGE), {C.INVALID_ARGUMENT})


# --- defects 1, 6, 7, 13 on the parameter server -------------------------------------------------

def test_ps_refuses_oversized_overflowing_and_misattributed_requests(cluster):
    p, c = Probe(cluster), cluster

    def body():
        before = ready(c)
        ps, me, chief = c.ps, c.me, c.chief_sender()

        req = pb("PullRequest")(sender=me, names=["probe/big"] * 40)
        assert len(req.SerializeToString()) < 600, "the oversized Pull is a small request"
        # A long deadline: a server that builds the reply must be seen to fail at this request.
        p.expect("Pull of the 64 MB variable 40 times (a 2.5 GB reply)",
                 ps.call("Pull", req, timeout=120), SIZE_REFUSALS)
        p.expect("Pull naming 65,537 variables",
                 ps.call("Pull", pb("PullRequest")(sender=me, names=["probe/small"] * 65537)),
                 SIZE_REFUSALS)

        def create(what, var, codes=frozenset({C.INVALID_ARGUMENT}), sender=chief, **kw):
            req = pb("CreateVariablesRequest")(sender=sender, variables=[var])
            return p.expect("CreateVariables " + what, ps.call("CreateVariables", req), codes, **kw)

        def var(name, t):
            v = pb("VariableDef")(name=name, initial_value=t)
            v.optimizer.name, v.optimizer.learning_rate = "sgd", 0.1
            return v

        create("[2^32, 2^32] with 0 bytes", var("probe/o1", tensor([2**32, 2**32], b"")),
               lacks="needs 0 bytes")
        create("[274177, 67280421310721] with 4 bytes",
               var("probe/o2", tensor([274177, 67280421310721], floats(1))))
        create("[2^62] with no data", var("probe/o3", tensor([2**62], b"")))
        create("of dtype 7", var("probe/o4", tensor([1], floats(1), dtype=7)), contains="7")
        create("of rank 33", var("probe/o5", tensor([1] * 33, floats(1))))
        create("with a 1025-byte name", var("x" * 1025, tensor([1], floats(1))))
        create("from job \"nobody\"", var("probe/intruder", tensor([1], floats(1))),
               SENDER_REFUSALS, sender=wire.sender("nobody", 0, 1))
        create("from worker 0", var("probe/intruder", tensor([1], floats(1))), SENDER_REFUSALS,
               sender=me)
        p.expect("Pull of a variable whose creation was refused",
                 ps.call("Pull", pb("PullRequest")(sender=me, names=["probe/intruder"])),
                 {C.NOT_FOUND})

        def push(what, grads, codes=frozenset({C.INVALID_ARGUMENT}), sender=me, **kw):
            req = pb("PushRequest")(sender=sender, gradients=grads)
            return p.expect("Push " + what, ps.call("Push", req), codes, **kw)

        def grad(name, t):
            return pb("Gradient")(name=name, gradient=t)

        small = grad("probe/small", tensor([3, 2], floats(*[0.5] * 6)))
        push("of dtype 7", [grad("probe/small", tensor([3, 2], floats(*[0.5] * 6), dtype=7))],
             contains="7")
        push("of a good gradient and one of shape [2^62]",
             [small, grad("dense0/bias", tensor([2**62], b""))])
        push("of a good gradient and one of shape [2^32, 2^32]",
             [small, grad("dense0/bias", tensor([2**32, 2**32], b""))])
        push("naming one variable twice", [small, small], {C.INVALID_ARGUMENT, C.ALREADY_EXISTS})
        push("from worker 0 with a wrong incarnation", [small], SENDER_REFUSALS,
             sender=wire.sender("worker", 0, c.incarnation ^ 1))
        pushes = list(c.stats().pushes_by_worker)
        push("with no gradient", [], {C.OK, C.INVALID_ARGUMENT})
        if list(c.stats().pushes_by_worker) != pushes:
            p.problems.append("an empty push counted in pushes_by_worker: %s -> %s"
                              % (pushes, list(c.stats().pushes_by_worker)))

        for who in (me, wire.sender("nobody", 0, 1)):
            p.expect("DeleteVariables from %s:%d" % (who.job, who.task),
                     ps.call("DeleteVariables", pb("DeleteVariablesRequest")(
                         sender=who, names=["probe/small"])), SENDER_REFUSALS)
        send_garbage(p, ps)
        for who in (wire.sender("nobody", 0, 1), wire.sender("worker", 0, c.incarnation),
                    wire.sender("chief", 0, c.chief_incarnation ^ 1)):
            p.expect("Shutdown from %s:%d (incarnation %d)" % (who.job, who.task, who.incarnation),
                     ps.call("Shutdown", pb("ShutdownRequest")(sender=who, reason="probe")),
                     SENDER_REFUSALS)
        c.check_stays_alive("the refused Shutdown requests")
        p.expect_unchanged(before)

    p.run(body)


def test_ps_configure_is_checked(cluster):
    p, c = Probe(cluster), cluster

    def body():
        ready(c, variables=False)  # configured by the chief, no variable yet
        ps, chief = c.ps, c.chief_sender()
        impostor = wire.sender("worker", 0, c.incarnation ^ 0x5a5a)

        def configure(what, sender, codes, num_workers=2, wait=0.0, workers=()):
            req = pb("ConfigureRequest")(sender=sender, wait_timeout_s=wait, workers=workers)
            req.consistency.mode, req.consistency.num_workers = "async", num_workers
            return p.expect("Configure " + what, ps.call("Configure", req), codes)

        configure("from worker 0 announcing another worker 0", c.me, SENDER_REFUSALS,
                  workers=[impostor])
        configure("from job \"nobody\"", wire.sender("nobody", 0, 1), SENDER_REFUSALS,
                  workers=[impostor])
        configure("from the chief with a NaN wait timeout", chief,
                  {C.INVALID_ARGUMENT, C.FAILED_PRECONDITION}, wait=math.nan)
        configure("from the chief with an infinite wait timeout", chief,
                  {C.INVALID_ARGUMENT, C.FAILED_PRECONDITION}, wait=math.inf)
        configure("from the chief with num_workers 2^31-1", chief,
                  SIZE_REFUSALS | {C.FAILED_PRECONDITION}, num_workers=2**31 - 1)
        c.create_standard_variables()
        before = c.pull()
        req = pb("PushRequest")(sender=impostor, gradients=[pb("Gradient")(
            name="probe/small", gradient=tensor([3, 2], floats(*[0.0] * 6)))])
        p.expect("Push from a worker 0 that only a refused Configure announced",
                 ps.call("Push", req), SENDER_REFUSALS)
        p.expect_unchanged(before)

    p.run(body)


def keys(*ks):
    return struct.pack("<%dQ" % len(ks), *ks)


def test_ps_refuses_bad_table_requests(cluster):
    p, c = Probe(cluster), cluster

    def body():
        before = ready(c)
        ps, me, chief = c.ps, c.me, c.chief_sender()

        def create(what, tables, codes=frozenset({C.INVALID_ARGUMENT}), sender=chief, **kw):
            req = pb("CreateTablesRequest")(sender=sender, tables=tables)
            return p.expect("CreateTables " + what, ps.call("CreateTables", req), codes, **kw)

        def table(name, dim=4, opt="sgd"):
            t = pb("TableDef")(name=name, dim=dim)
            t.initializer.kind, t.optimizer.name, t.optimizer.learning_rate = "zeros", opt, 0.1
            return t

        for who in (me, wire.sender("nobody", 0, 1),
                    wire.sender("chief", 0, c.chief_incarnation ^ 1)):
            create("from %s:%d (incarnation %d)" % (who.job, who.task, who.incarnation),
                   [table("probe/intruder")], SENDER_REFUSALS, sender=who)
        create("of dim 2^31-1", [table("probe/t1", 2**31 - 1)])
        create("of dim 0", [table("probe/t2", 0)], contains="probe/t2")
        create("of dim -1", [table("probe/t3", -1)], contains="probe/t3")
        create("with a 1025-byte name", [table("x" * 1025)])
        create("with optimizer rmsprop", [table("probe/t4", opt="rmsprop")],
               contains="probe/t4")
        create("of 4,097 tables", [table("probe/n%d" % i) for i in range(4097)],
               SIZE_REFUSALS)
        create("of a good table and a taken name with another dim",
               [table("probe/fresh"), table("probe/emb", 8)], {C.ALREADY_EXISTS},
               contains="probe/emb")

        def lookup(what, tables, codes=frozenset({C.INVALID_ARGUMENT}), sender=me, **kw):
            req = pb("LookupRequest")(sender=sender, tables=[
                pb("TableKeys")(table=t, keys=k) for t, k in tables])
            return p.expect("Lookup " + what, ps.call("Lookup", req, timeout=120), codes, **kw)

        lookup("of a table whose creation was refused", [("probe/fresh", keys(1))],
               {C.NOT_FOUND}, contains="probe/fresh")
        lookup("of 2,000 rows of the widest table (a 524 MB reply)",
               [("probe/wide", keys(*range(2000)))], SIZE_REFUSALS)
        lookup("of 2^22 + 1 keys", [("probe/emb", bytes(8 * (2**22 + 1)))], SIZE_REFUSALS)
        lookup("of 13 bytes of keys", [("probe/emb", bytes(13))], contains="probe/emb")
        lookup("of one key twice", [("probe/emb", keys(7, 8, 7))], contains="key 7")
        lookup("naming one table twice", [("probe/emb", keys(1)), ("probe/emb", keys(2))])
        lookup("from worker 0 with a wrong incarnation", [("probe/emb", keys(1))],
               SENDER_REFUSALS, sender=wire.sender("worker", 0, c.incarnation ^ 1))

        def push(what, grads, codes=frozenset({C.INVALID_ARGUMENT}), sender=me, **kw):
            req = pb("PushSparseRequest")(sender=sender, gradients=grads)
            return p.expect("PushSparse " + what, ps.call("PushSparse", req, timeout=60),
                            codes, **kw)

        def grad(name, ks, rows, read_version=0):
            return pb("SparseGradient")(table=name, keys=keys(*ks), rows=floats(*rows),
                                        read_version=read_version)

        good = grad("probe/emb", TABLE_KEYS[:1], [0.5] * 4)
        push("of a good gradient and one with 3 floats for a key of dim 65536",
             [good, grad("probe/wide", [1], [1, 2, 3])], contains="probe/wide")
        push("of 3 floats for a key of dim 4", [grad("probe/emb", [1], [1, 2, 3])],
             contains="probe/emb")
        push("of a good gradient and a NaN", [grad("probe/wide", [2], [0.0] * 65535 + [math.nan]),
                                              good], contains="key 2")
        push("of a key never looked up", [grad("probe/emb", [424242], [1] * 4)],
             contains="424242")
        push("with read_version 2^63", [grad("probe/emb", [1], [1] * 4, 2**63)],
             contains="probe/emb")
        push("of one key twice", [grad("probe/emb", [1, 1], [1] * 8)], contains="key 1")
        push("naming one table twice", [good, good])
        push("of 2^22 + 1 keys", [pb("SparseGradient")(table="probe/emb",
                                                        keys=bytes(8 * (2**22 + 1)))])
        for who in (wire.sender("worker", 0, c.incarnation ^ 1), wire.sender("nobody", 0, 1),
                    chief):
            push("from %s:%d (incarnation %d)" % (who.job, who.task, who.incarnation),
                 [good], SENDER_REFUSALS, sender=who)
        pushes = list(c.stats().pushes_by_worker)
        push("with no gradient", [], {C.OK, C.INVALID_ARGUMENT})
        if list(c.stats().pushes_by_worker) != pushes:
            p.problems.append("an empty sparse push counted in pushes_by_worker: %s -> %s"
                              % (pushes, list(c.stats().pushes_by_worker)))
        stats = c.stats()
        if [t.name for t in stats.tables] != sorted(TABLES):
            p.problems.append("Stats lists tables %s, expected %s"
                              % ([t.name for t in stats.tables], sorted(TABLES)))
        p.expect_unchanged(before)

    p.run(body)


# --- defects 6, 7, 13 on the chief ----------------------------------------------------------------

def test_chief_checks_senders_and_sizes(cluster):
    p, c = Probe(cluster), cluster
    forged = wire.sender("worker", 0, c.incarnation ^ 0x77)

    def body():
        before = ready(c)
        master, me = c.master, c.me

        def create(what, shape, sender=me, codes=SIZE_REFUSALS, opt=None, timeout=60,
                   partitioner=""):
            spec = pb("VariableSpec")(name="probe/c", shape=shape, partitioner=partitioner)
            spec.initializer.kind = "zeros"
            if opt:
                spec.optimizer.CopyFrom(opt)
            req = pb("CreateVariableRequest")(sender=sender, spec=spec)
            return p.expect("CreateVariable " + what, master.call("CreateVariable", req,
                                                                  timeout=timeout), codes)

        create("[2^32, 2^32]", [2**32, 2**32])
        create("[274177, 67280421310721]", [274177, 67280421310721])
        create("[2^62]", [2**62])
        # The default partitioner splits a large variable into shards that travel; unsplit, a
        # 1 GiB variable is more than a message may carry and is refused before it is drawn.
        create("[2^28] (1 GiB) unpartitioned", [2**28], partitioner="none")
        create("with an optimizer without a name and lr -1", [2],
               codes={C.INVALID_ARGUMENT}, opt=pb("OptimizerConfig")(learning_rate=-1))
        create("from worker 0 with a wrong incarnation", [2], forged, SENDER_REFUSALS)
        create("from job \"nobody\"", [2], wire.sender("nobody", 0, 1),
               SENDER_REFUSALS | {C.INVALID_ARGUMENT})

        def register(what, sender, codes):
            req = pb("RegisterRequest")(sender=sender, address="127.0.0.1:1")
            return p.expect("Register " + what, master.call("Register", req, timeout=10), codes)

        register("from job \"nobody\"", wire.sender("nobody", 0, 1),
                 SENDER_REFUSALS | {C.INVALID_ARGUMENT})
        register("of worker 99", wire.sender("worker", 99, 1), {C.PERMISSION_DENIED})
        register("of worker -1", wire.sender("worker", -1, 1), {C.PERMISSION_DENIED})
        register("of ps 1 (of 1)", wire.sender("ps", 1, 1), {C.PERMISSION_DENIED})
        register("of running worker 0 with a new incarnation", forged, REREGISTER_REFUSALS)
        register("of running worker 1 with a new incarnation", wire.sender("worker", 1, 12345),
                 REREGISTER_REFUSALS)
        p.expect("CreateVariable by the real worker 0 after a forged re-Register",
                 master.call("CreateVariable", pb("CreateVariableRequest")(
                     sender=me, spec=pb("VariableSpec")(name="probe/small", shape=[3, 2]))),
                 {C.OK})

        def report(what, codes, **fields):
            req = pb("ProgressRequest")(**fields)
            return p.expect("ReportProgress " + what, master.call("ReportProgress", req), codes)

        report("with a wrong incarnation claiming 10^6 steps", SENDER_REFUSALS,
               sender=forged, steps=10**6, examples=10**6)
        report("from job \"nobody\"", SENDER_REFUSALS | {C.INVALID_ARGUMENT},
               sender=wire.sender("nobody", 0, 1), steps=5)
        report("with a wrong incarnation carrying an error", SENDER_REFUSALS, sender=forged,
               error="forged failure")
        out = p.expect("ReportProgress by the real worker 0", c.report(), {C.OK})
        if out.ok and out.response.stop:
            p.problems.append("the job is ending after a forged report carried an error")
        p.expect("Barrier from worker 0 with a wrong incarnation",
                 master.call("Barrier", pb("BarrierRequest")(sender=forged, name=END_BARRIER),
                             timeout=10), SENDER_REFUSALS)
        send_garbage(p, master)
        p.expect_unchanged(before)

    p.run(body)
    if c.result is not None and c.result.get("worker_steps") != [0, 1]:
        pytest.fail("forged progress was counted: worker_steps %s, expected [0, 1] (worker 0 "
                    "reported no step, worker 1 one)" % c.result.get("worker_steps"))


# --- a task outside the cluster, on every method of the chief and the PS ---------------------------

def test_a_task_outside_the_cluster_is_denied_on_every_method(cluster):
    """docs/semantics.md: anything not allowed gets PERMISSION_DENIED; worker:5 and worker:-1 of a
    job of 2 workers are not in the cluster, whatever incarnation they claim."""
    p, c = Probe(cluster), cluster

    def body():
        before = ready(c)
        small = pb("Gradient")(name="probe/small", gradient=tensor([3, 2], floats(*[0.5] * 6)))
        row = pb("SparseGradient")(table="probe/emb", keys=struct.pack("<Q", TABLE_KEYS[0]),
                                   rows=floats(0.5, 0.5, 0.5, 0.5))
        for task in (5, -1):
            who = wire.sender("worker", task, c.incarnation)
            master_calls = {
                "Register": pb("RegisterRequest")(sender=who, address="127.0.0.1:1"),
                "ReportProgress": pb("ProgressRequest")(sender=who, steps=10**6, error="forged"),
                "CreateVariable": pb("CreateVariableRequest")(
                    sender=who, spec=pb("VariableSpec")(name="probe/outsider", shape=[2])),
                "Barrier": pb("BarrierRequest")(sender=who, name=END_BARRIER),
                "CreateTable": pb("CreateTableRequest")(sender=who),
                "NextTask": pb("NextTaskRequest")(sender=who),
                "TaskDone": pb("TaskDoneRequest")(sender=who),
                "Heartbeat": pb("HeartbeatRequest")(sender=who),
            }
            ps_calls = {
                "Push": pb("PushRequest")(sender=who, gradients=[small]),
                "PushSparse": pb("PushSparseRequest")(sender=who, gradients=[row]),
                "Pull": pb("PullRequest")(sender=who, names=["probe/small"]),
                "Lookup": pb("LookupRequest")(sender=who, tables=[pb("TableKeys")(
                    table="probe/emb", keys=struct.pack("<Q", TABLE_KEYS[0]))]),
                "Leave": pb("LeaveRequest")(sender=who),
                "Stats": pb("StatsRequest")(sender=who),
                "DeleteVariables": pb("DeleteVariablesRequest")(sender=who, names=["probe/small"]),
                "Reset": pb("ResetRequest")(sender=who),
                "AppliedTasks": pb("AppliedTasksRequest")(sender=who),
                "Shutdown": pb("ShutdownRequest")(sender=who, reason="probe"),
            }
            for peer, calls in ((c.master, master_calls), (c.ps, ps_calls)):
                for method, req in calls.items():
                    p.expect("%s from worker:%d" % (method, task),
                             peer.call(method, req, timeout=10), {C.PERMISSION_DENIED})
        c.check_stays_alive("the refused Shutdown requests")
        p.expect_unchanged(before)

    p.run(body)


# --- defect 6 on a worker -------------------------------------------------------------------------

def test_worker_checks_senders(cluster):
    p, c = Probe(cluster), cluster

    def body():
        before = ready(c)
        worker = c.worker
        send_garbage(p, worker)
        # The spec the chief would send: only the sender is wrong.
        spec = c.training_spec()
        for who in (wire.sender("nobody", 0, 1), c.me,
                    wire.sender("chief", 0, c.chief_incarnation ^ 1)):
            what = "%s:%d (incarnation %d)" % (who.job, who.task, who.incarnation)
            p.expect("StartTraining from " + what, worker.call("StartTraining", pb(
                "StartTrainingRequest")(sender=who, spec=spec), timeout=60), SENDER_REFUSALS)
            p.expect("Shutdown of worker 1 from " + what, worker.call(
                "Shutdown", pb("ShutdownRequest")(sender=who, reason="probe")), SENDER_REFUSALS)
        c.check_stays_alive("the refused Shutdown requests")
        p.expect_unchanged(before)
        # finish() then starts worker 1 for real: the refused requests must not have used it up.

    p.run(body)


# --- 1,000 seeded random payloads to every method ------------------------------------------------

# Methods in an order that leaves the ones able to end the job for last.
ORDER = {"Shutdown": 9, "ReportProgress": 8, "Register": 7, "Configure": 6, "Leave": 5}


def defuse_if_legitimate(c, req, req_cls, method, rng):
    """Keeps a random request from being one the real worker 0 may send and the server must obey:
    its pushes (dense and sparse) always carry one invalid gradient (so none may be applied), its progress reports
    neither fail nor end the job, and its barriers wait only briefly. Random bytes that happen to
    parse as such a request (a corrupted copy of a real one) are defused the same way.
    Returns the request to send and its timeout."""
    if isinstance(req, bytes):
        parsed = req_cls()
        try:
            parsed.ParseFromString(req)
        except Exception:  # does not parse: the server must say so
            return req, 10.0
        if not parsed.HasField("sender") or parsed.sender != c.me:
            return req, 10.0
        parsed, timeout = defuse_if_legitimate(c, parsed, req_cls, method, rng)
        return parsed.SerializeToString(), timeout
    if not req.HasField("sender") or req.sender != c.me:
        return req, 10.0
    if method == "Push":
        req.gradients.add(name="probe/absent", gradient=tensor([1], floats(0)))
    elif method == "PushSparse":
        req.gradients.add(table="probe/absent")
    elif method == "ReportProgress":
        req.error, req.done = "", False
    elif method == "Barrier":
        return req, 0.5
    elif method == "Leave":
        req.pause = rng.random() < 0.5
    return req, 10.0


@pytest.mark.parametrize("service", wire.SERVICES)
def test_random_payloads(cluster, service):
    p, c = Probe(cluster), cluster
    counts = {}
    bad_kinds = {}  # what went wrong -> [how often, first case, its payload]

    def body():
        before = ready(c)
        peer = c.peers[service]
        senders = [c.me, wire.sender("worker", 1, 0), wire.sender("ps", 0, 0),
                   wire.sender("chief", 0, c.chief_incarnation ^ 1)]
        shapes = [v[2] for v in before.values()]
        for method, req_cls, _ in sorted(wire.methods(service), key=lambda m: ORDER.get(m[0], 0)):
            rng = random.Random("%d/%s/%s" % (SEED, service, method))
            gen = payloads.Generator(rng, list(before.keys()) + list(TABLES), shapes, senders,
                                     [c.data_dir, "", "/nonexistent", "/dev/null", "/"])
            for i in range(PAYLOADS_PER_METHOD):
                req = gen.request(req_cls)
                req, timeout = defuse_if_legitimate(c, req, req_cls, method, rng)
                out = peer.call(method, req, timeout=timeout)
                what = "%s %s payload %d" % (service.split(".")[1], method, i)
                c.check_alive(what)
                key = (method, out.code.name)
                counts[key] = counts.get(key, 0) + 1
                brief = repr(req)[:200] if isinstance(req, bytes) else str(req)[:200]
                if out.code == C.DEADLINE_EXCEEDED and timeout < 1:
                    continue  # the real worker 0 waiting at a barrier the other worker skips
                if out.code not in REFUSALS | {C.OK}:
                    bad = "%s %r" % (method, out)
                elif not out.ok and not out.details.strip():
                    bad = "%s %s with an empty message" % (method, out.code.name)
                elif (method == "Pull" and out.ok and not isinstance(req, bytes) and
                      len(out.response.values) != len(req.names)):
                    bad = "Pull answered with a value count unlike its name count"
                elif (method == "Lookup" and out.ok and not isinstance(req, bytes) and
                      [len(t.rows) for t in out.response.tables] !=
                      [len(t.keys) // 2 * TABLES.get(t.table, -1) for t in req.tables]):
                    bad = "Lookup answered with rows unlike its keys"
                else:
                    continue
                first = bad_kinds.setdefault(bad[:160], [0, what, brief.replace("\n", " ")])
                first[0] += 1
        p.expect_unchanged(before, "after the random payloads")

    def listed():
        for kind, (n, what, brief) in bad_kinds.items():
            p.problems.append("%d x %s (first: %s: %s)" % (n, kind, what, brief))

    try:
        p.run(body, before_assert=listed)
    finally:
        print("status codes by method (seed %d): %s" % (SEED, sorted(counts.items())))


def test_generated_shapes_are_safe_to_send():
    """The generator's guard: what it lets through never makes a correct server allocate much."""
    assert payloads.safe_shape([2**32, 2**32])          # wraps to 0
    assert payloads.safe_shape([274177, 67280421310721])  # wraps to 1
    assert payloads.safe_shape([2**62])                 # refused by any count check
    assert payloads.safe_shape([784, 10])
    assert not payloads.safe_shape([2**31])             # 8 GB if a server believed it
    assert not payloads.safe_shape([2**28])
    gen = payloads.Generator(random.Random(SEED), ["w"], [[2]], [], ["/"])
    for _ in range(2000):
        assert payloads.safe_shape(gen.shape())
    assert BIG_ELEMENTS * 4 == 64 << 20
