"""The chief's live status page in a real browser: a 2 PS + 2 worker MNIST job of real
``pstrain server`` processes with a job token, the chief serving HTTP on --metrics_port, and
headless Chromium loading ``/?token=`` twice while the job runs. The page must list every task
with its address and show a global step that moves between the loads; without the token the
page and /api/status answer 401.

PSTRAIN_STATUS_SCREENSHOT=path keeps the screenshot taken during the run (docs/status_page.png).
"""

import html
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import Cluster, free_ports  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
TOKEN = "status-page-test-token-7f3a"
MNIST = os.path.join(os.environ.get("PSTRAIN_SOURCE_DIR", "."), "data", "mnist")
TASKS = ["chief:0", "ps:0", "ps:1", "worker:0", "worker:1"]


def http_get(url, timeout=5):
    """(status, body) of a GET; 4xx and 5xx answers are returned, not raised."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def chromium(args, profile, timeout=60):
    """Runs headless Chromium with `args`; its stdout."""
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", "--user-data-dir=" + str(profile)] + args
    r = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, "chromium failed (%d):\n%s" % (r.returncode, r.stderr[-2000:])
    return r.stdout


def dom_step(dom):
    """The global step the page shows: "1,234 / 3,750" -> 1234."""
    m = re.search(r'id="global_step"[^>]*>([0-9,]+)', dom)
    assert m, "no global step in the page:\n" + dom[-3000:]
    return int(m.group(1).replace(",", ""))


def task_rows(dom):
    """{task: its row's cell texts} of the page's cluster table."""
    body = re.search(r'<table id="tasks">.*?<tbody>(.*?)</tbody>', dom, re.S)
    assert body, "no cluster table in the page:\n" + dom[-3000:]
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", body.group(1), re.S):
        cells = [html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
        rows[cells[0]] = cells
    return rows


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path / "cluster", num_ps=2, num_workers=2)
    os.makedirs(c.log_dir)
    yield c
    c.kill_all()


def start_job(c, port):
    """Starts the PS, the workers and the chief: MNIST for some 20-30 s, worker:1 slowed."""
    token = {"PSTRAIN_AUTH_TOKEN": TOKEN}
    base = [c.binary, "server", "--connect_timeout", "60", "--log_level", "warn"]
    for job in ("ps", "worker"):
        for i in range(2):
            c.start_process("%s%d" % (job, i), base, c.env(job, i, token))
    chief = base + ["--data", MNIST, "--model", "mlp", "--hidden", "64", "--epochs", "1",
                    "--batch", "32", "--slow_worker", "1", "--slow_worker_delay_ms", "40",
                    "--metrics_port", str(port), "--metrics_linger", "5",
                    # fixed shards: the slow worker's shard keeps the job running while the
                    # page is loaded twice (the task queue would give its work to the other)
                    "--task_rows", "0"]
    c.chief = c.start_process("chief", chief, c.env("chief", 0, token))


def wait_for(what, predicate, c, timeout=60):
    end = time.time() + timeout
    while time.time() < end:
        value = predicate()
        if value:
            return value
        if c.chief.popen.poll() is not None:
            pytest.fail("chief ended while waiting for %s\n%s" % (what, c.output()))
        time.sleep(0.3)
    pytest.fail("timed out waiting for %s\n%s" % (what, c.output()))


def test_status_page_shows_the_cluster_and_a_moving_step(cluster, tmp_path):
    assert os.path.exists(CHROMIUM), CHROMIUM + " is not installed"
    port = free_ports(1)[0]
    base = "http://127.0.0.1:%d" % port
    start_job(cluster, port)

    def running():
        try:
            status, body = http_get(base + "/api/status?token=" + TOKEN)
        except OSError:
            return None
        s = json.loads(body) if status == 200 else {}
        return s if s.get("state") == "running" and s.get("global_step", 0) > 0 else None

    s = wait_for("the job to run", running, cluster)
    assert [t["name"] for t in s["tasks"]] == TASKS
    assert s["mode"] == "async" and s["model"] == "mlp" and s["epochs"] == 1
    assert s["total_steps"] > s["global_step"] > 0
    assert s["workers_alive"] == 2
    assert {p["ps"] for p in s["placement"]} == {0, 1}
    assert [p["bytes"] for p in s["ps"]] == [
        sum(p["bytes"] for p in s["placement"] if p["ps"] == i) for i in (0, 1)]

    # The token guards both paths: none, or a wrong one, is 401.
    for path in ("/", "/api/status", "/?token=wrong", "/api/status?token=wrong"):
        status, _ = http_get(base + path)
        assert status == 401, "%s answered %d without the token" % (path, status)

    page = base + "/?token=" + TOKEN
    load = ["--virtual-time-budget=3000", "--dump-dom", page]
    first = chromium(load, tmp_path / "profile1")
    time.sleep(3)
    shot = tmp_path / "status_page.png"
    chromium(["--virtual-time-budget=3000", "--hide-scrollbars", "--window-size=1280,900",
              "--screenshot=%s" % shot, page], tmp_path / "profile2")
    second = chromium(load, tmp_path / "profile3")

    for dom in (first, second):
        rows = task_rows(dom)
        assert sorted(rows) == sorted(TASKS), rows
        for t in s["tasks"]:
            assert rows[t["name"]][1] == t["address"], rows[t["name"]]
        assert rows["chief:0"][2] == "running"
        assert "<polyline" in dom, "no loss curve drawn"
    assert dom_step(second) > dom_step(first) > 0, "the global step did not move"

    with open(shot, "rb") as f:
        png = f.read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20000, "no screenshot of the page"
    if os.environ.get("PSTRAIN_STATUS_SCREENSHOT"):
        shutil.copy(shot, os.environ["PSTRAIN_STATUS_SCREENSHOT"])

    # The job ends well, and /api/status says so while the listener lingers.
    def finished():
        status, body = http_get(base + "/api/status?token=" + TOKEN)
        s = json.loads(body) if status == 200 else {}
        return s if s.get("state") in ("succeeded", "failed") else None

    s = wait_for("the end of the job", finished, cluster, timeout=120)
    assert s["state"] == "succeeded" and s["error"] == "", s
    assert s["global_step"] == s["total_steps"] and s["eta_seconds"] == 0, s
    assert [t["state"] for t in s["tasks"]] == ["done"] * 5, s["tasks"]
    assert sum(p["pushes"] for p in s["ps"]) > 0, s["ps"]
    assert 1 < len(s["loss_curve"]) <= 300
    assert cluster.chief.wait(60) == 0, cluster.output()
    result = json.loads([l for l in cluster.chief.stdout.splitlines() if l.startswith("{")][-1])
    assert result["test_accuracy"] > 0.8, result
