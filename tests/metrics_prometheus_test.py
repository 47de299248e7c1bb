"""Every task's /metrics, scraped by a real Prometheus (Debian's /usr/bin/prometheus): a 2 PS +
2 worker MNIST job started by hand (`pstrain server` per task, TF_CONFIG, --metrics_port each),
Prometheus on a free port with a generated config scraping every task every 500 ms, and queries
through its HTTP API: the workers' step counters rise while the job runs, and after it the PS
counters summed over the PS equal the chief's final JSON line.

The fast cases: a metrics port already taken is an error at start naming the port, and the HTTP
listener refuses an unknown path (404), a wrong method (405) and huge headers (431; 400 for one
line over 8 KiB), logs the peer (but for that 400), and still serves /metrics and /healthz.
"""

import http.client
import json
import os
import socket
import sys
import time
import urllib.parse
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import Cluster, free_ports, wait_for  # noqa: E402

PROMETHEUS = "/usr/bin/prometheus"
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
LINGER_S = 4
# 10 epochs of a small MLP: long enough (about 13 s on an idle machine) for a few scrapes.
CHIEF_FLAGS = ["--data", os.path.join(SOURCE_DIR, "data", "mnist"), "--epochs", "10",
               "--batch", "32", "--hidden", "16"]
# The chief's result fields that are the PS counters summed over the PS, and their metrics.
SUMMED = {"updates_applied": "pstrain_ps_updates_applied_total",
          "stale_dropped": "pstrain_ps_stale_dropped_total",
          "nonfinite_rejected": "pstrain_ps_nonfinite_rejected_total",
          "pulls_waited": "pstrain_ps_pulls_waited_total"}


@pytest.fixture
def cluster(tmp_path):
    """cluster(num_ps, num_workers) -> a Cluster not started yet; everything it started (and
    anything carrying its tag) is killed when the test ends."""
    made = []

    def make(num_ps, num_workers):
        c = Cluster(tmp_path / ("cluster%d" % len(made)), num_ps, num_workers)
        os.makedirs(c.log_dir, exist_ok=True)
        made.append(c)
        return c

    yield make
    for c in made:
        c.kill_all()


def other_free_ports(c, n):
    """n free ports that are not among the cluster's gRPC ports."""
    taken = {int(a.rsplit(":", 1)[1]) for tasks in c.spec.values() for a in tasks}
    while True:
        ports = free_ports(n)
        if not taken & set(ports):
            return ports


def start_task(c, job, index, metrics_port, flags=()):
    argv = [c.binary, "server", "--connect_timeout", "60", "--log_level", "warn",
            "--metrics_port", str(metrics_port), "--metrics_linger", str(LINGER_S)] + list(flags)
    return c.start_process("%s%d" % (job, index), argv, c.env(job, index))


def http_get(port, path, method="GET", headers=None):
    """(status, body, the client's own port) of one request to 127.0.0.1:port."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        client_port = conn.sock.getsockname()[1]
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace"), client_port
    finally:
        conn.close()


class Prometheus:
    """A Prometheus server scraping `targets` ({job: ["127.0.0.1:port", ...]}) every 500 ms."""

    def __init__(self, c, port, targets):
        self.port = port
        data = os.path.join(c.log_dir, "prometheus")
        os.makedirs(data)
        config = os.path.join(c.log_dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 500ms\n  scrape_timeout: 400ms\n"
                    "scrape_configs:\n")
            for job, addresses in targets.items():
                f.write("  - job_name: %s\n    static_configs:\n      - targets: [%s]\n"
                        % (job, ", ".join('"%s"' % a for a in addresses)))
        assert os.path.exists(PROMETHEUS), "%s is not installed (scripts/setup.sh)" % PROMETHEUS
        env = dict(os.environ, PSTRAIN_TEST_TAG=c.tag)
        self.process = c.start_process("prometheus", [
            PROMETHEUS, "--config.file=" + config, "--storage.tsdb.path=" + data,
            "--web.listen-address=127.0.0.1:%d" % port], env)
        wait_for(self.ready, 30, "prometheus to be ready\n" + self.process.output())

    def ready(self):
        assert self.process.popen.poll() is None, self.process.output()
        try:
            return http_get(self.port, "/-/ready")[0] == 200
        except OSError:
            return False

    def api(self, path, **params):
        url = "http://127.0.0.1:%d/api/v1/%s?%s" % (self.port, path, urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def query(self, expr):
        """{instance: value} of an instant query."""
        return {s["metric"].get("instance", ""): float(s["value"][1])
                for s in self.api("query", query=expr)}

    def scalar(self, expr):
        values = list(self.query(expr).values())
        return values[0] if len(values) == 1 else None


def test_prometheus_scrapes_a_running_job(cluster):
    c = cluster(2, 2)
    ports = other_free_ports(c, 6)
    metrics = {("chief", 0): ports[0], ("ps", 0): ports[1], ("ps", 1): ports[2],
               ("worker", 0): ports[3], ("worker", 1): ports[4]}
    targets = {}
    for (job, _), port in metrics.items():
        targets.setdefault(job, []).append("127.0.0.1:%d" % port)
    prom = Prometheus(c, ports[5], targets)
    started = time.time()
    tasks = {}
    for (job, index), port in sorted(metrics.items(), key=lambda t: t[0][0] == "chief"):
        tasks[job, index] = start_task(c, job, index, port, CHIEF_FLAGS if job == "chief" else ())
    chief = tasks["chief", 0]

    # Every task is up, and each worker's step counter rises between two samples.
    wait_for(lambda: prom.scalar("count(up == 1)") == 5, 60, "5 targets up\n" + c.output())
    workers = ["127.0.0.1:%d" % metrics["worker", i] for i in range(2)]
    samples = []

    def stepped():
        """Whether every worker's steps rose above the last sample kept (0 at first)."""
        steps = prom.query('pstrain_worker_steps_total{job="worker"}')
        assert chief.popen.poll() is None, "job ended before two samples\n" + c.output()
        before = samples[-1] if samples else {}
        if all(steps.get(w, 0) > before.get(w, 0) for w in workers):
            samples.append(steps)
        return len(samples) == 2

    wait_for(stepped, 90, "steps to rise: %s\n%s" % (samples, c.output()))

    code = chief.wait(180)
    assert code == 0, c.output()
    for name, p in tasks.items():
        assert p.wait(60) == 0, p.output()
    lines = [line for line in chief.stdout.splitlines() if line.startswith("{")]
    assert lines, c.output()
    result = json.loads(lines[-1])

    # The final counters, scraped while the tasks lingered, equal the chief's result.
    def last(metric):
        return prom.scalar("sum(max_over_time(%s[5m]))" % metric)

    expected = {metric: result[field] for field, metric in SUMMED.items()}
    expected["pstrain_worker_steps_total"] = result["steps"]
    expected["pstrain_worker_examples_total"] = result["examples"]
    # Dense variables only: every update bumps one variable's version.
    expected["pstrain_ps_variable_version"] = result["updates_applied"]
    scraped = {}

    def final():
        scraped.update({m: last(m) for m in expected})
        return scraped == expected

    try:
        wait_for(final, 15, "the final counters")
    finally:
        assert scraped == expected, "scraped %s, expected %s\n%s" % (scraped, expected, result)
    assert result["updates_applied"] > 0 and result["steps"] > 0, result

    # The steps of each worker, sampled every 500 ms, never fall and rose several times.
    series = prom.api("query_range", query='pstrain_worker_steps_total{job="worker"}',
                      start=started, end=time.time(), step="0.5")
    assert sorted(s["metric"]["instance"] for s in series) == sorted(workers), series
    for s in series:
        values = [float(v) for _, v in s["values"]]
        assert values == sorted(values), s
        assert len(set(values)) >= 3, s

    # The chief's view: the final global step, both workers seen alive, the job succeeded.
    chief_target = 'job="chief"'
    assert prom.scalar("max_over_time(pstrain_job_global_step{%s}[5m])" % chief_target) == \
        result["global_step"]
    assert prom.scalar("max_over_time(pstrain_job_workers_alive{%s}[5m])" % chief_target) == 2
    assert prom.scalar('max_over_time(pstrain_job_state{%s,state="running"}[5m])'
                       % chief_target) == 1
    assert prom.scalar('max_over_time(pstrain_job_state{%s,state="succeeded"}[5m])'
                       % chief_target) == 1

    # Every task says which it is; the PS served their pulls and pushes.
    info = prom.query("max_over_time(pstrain_task_info[5m])")
    assert len(info) == 5, info
    assert prom.scalar('sum(max_over_time(pstrain_rpc_requests_total{job="ps",method="Pull",'
                       'code="OK"}[5m]))') > 0
    assert prom.scalar('sum(max_over_time(pstrain_rpc_latency_seconds_count{job="ps",'
                       'method="Push"}[5m]))') > 0
    assert prom.scalar('min(max_over_time(pstrain_process_resident_memory_bytes[5m]))') > 1e6


def test_a_taken_metrics_port_is_an_error_at_start(cluster):
    c = cluster(1, 1)
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        p = start_task(c, "ps", 0, port)
        code = p.wait(30)
    finally:
        holder.close()
    assert code != 0, p.output()
    assert "127.0.0.1:%d" % port in p.stderr, p.output()


def test_the_listener_refuses_bad_requests_and_keeps_serving(cluster):
    c = cluster(1, 1)
    port = other_free_ports(c, 1)[0]
    ps = start_task(c, "ps", 0, port)  # no chief: it waits, serving its listener

    def healthy():
        try:
            return http_get(port, "/healthz")[:2] == (200, "ok\n")
        except OSError:
            return False

    wait_for(healthy, 30, "/healthz\n" + ps.output())
    status, body, unknown_peer = http_get(port, "/no/such/page")
    assert status == 404, body
    status, body, post_peer = http_get(port, "/metrics", method="POST")
    assert status == 405, body
    many = {"X-Filler-%d" % i: "a" * 4000 for i in range(8)}
    status, body, big_peer = http_get(port, "/metrics", headers=many)
    assert status == 431, body
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Huge: " + b"a" * 100000 + b"\r\n\r\n")
        reply = s.recv(4096).decode(errors="replace")
    # cpp-httplib refuses a header line over 8 KiB itself, before it looks up the peer.
    assert reply.startswith("HTTP/1.1 400"), reply

    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        status, body = r.status, r.read().decode()
    assert status == 200, body
    assert 'pstrain_task_info{task="ps:0",job="ps",index="0"} 1\n' in body, body
    assert "# TYPE pstrain_rpc_requests_total counter\n" in body, body
    assert healthy()
    log = ps.stderr
    for method, path, peer, code in [("GET", "/no/such/page", unknown_peer, 404),
                                     ("POST", "/metrics", post_peer, 405),
                                     ("GET", "/metrics", big_peer, 431)]:
        line = "http %s %s from 127.0.0.1:%d: %d" % (method, path, peer, code)
        assert line in log, "no line %r in\n%s" % (line, log)
    assert "from a peer whose request did not parse: 400" in log, log
    assert ps.popen.poll() is None, ps.output()
