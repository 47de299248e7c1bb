"""`pstrain server --log_format json`: every line a task logs on stderr is one JSON object with
"time" (RFC 3339, UTC, milliseconds), "level", "task", "logger" and "message", escaped so that a
message with quotes and newlines comes back as it was; a task's final error is such a line too.
`--log_format text` keeps spdlog's text lines, and any other value is refused by the flag parser
before anything starts.
"""

import datetime
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import BINARY, Process, free_ports, tagged_pids  # noqa: E402

SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
KEYS = ["time", "level", "task", "logger", "message"]
LEVELS = {"trace", "debug", "info", "warning", "error", "critical"}
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
TEXT_LINE = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[pstrain\] \[(\w+)\] ")


def cluster_file(tmp_path):
    """A cluster of 1 chief, 1 PS and 1 worker on free ports of 127.0.0.1."""
    a = ["127.0.0.1:%d" % p for p in free_ports(3)]
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({"cluster": {"chief": a[:1], "ps": a[1:2], "worker": a[2:]}}))
    return str(path)


def run(argv, timeout=60):
    assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
    return subprocess.run([BINARY] + argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, cwd=SOURCE_DIR)


def json_records(stderr, task, allow=()):
    """Every stderr line as a dict, checked; lines starting with one of `allow` are left out."""
    records = []
    now = datetime.datetime.now(datetime.timezone.utc)
    lines = stderr.splitlines()
    assert lines, "nothing on stderr"
    for line in lines:
        if any(line.startswith(a) for a in allow):
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise AssertionError("not a JSON line (%s): %r" % (e, line))
        assert list(record) == KEYS, record
        assert TIME.fullmatch(record["time"]), record
        at = datetime.datetime.strptime(record["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
        age = now - at.replace(tzinfo=datetime.timezone.utc)
        assert datetime.timedelta(seconds=-5) < age < datetime.timedelta(minutes=5), record
        assert record["level"] in LEVELS, record
        assert record["task"] == task and record["logger"] in ("pstrain", "progress"), record
        assert isinstance(record["message"], str) and record["message"], record
        records.append(record)
    return records


def test_a_chief_that_fails_logs_only_json_lines(tmp_path):
    cluster = cluster_file(tmp_path)
    # A data path with a quote, a backslash and a newline: the error names it, escaped.
    bad = str(tmp_path / 'no "such"\\\ndir')
    r = run(["server", "--cluster", cluster, "--job", "chief", "--task", "0",
             "--log_format", "json", "--data", bad])
    assert r.returncode == 1, r.stderr
    records = json_records(r.stderr, "chief:0")
    assert records[-1]["level"] == "error", records
    assert bad in records[-1]["message"], records[-1]
    # Waiting for tasks that never come: the info lines and the final error are JSON.
    r = run(["server", "--cluster", cluster, "--job", "chief", "--task", "0",
             "--log_format", "json", "--connect_timeout", "1"])
    assert r.returncode == 1, r.stderr
    records = json_records(r.stderr, "chief:0")
    assert any(x["level"] == "info" and "waiting for 1 ps and 1 workers" in x["message"]
               for x in records), records
    assert records[-1]["level"] == "error", records
    assert "waiting for tasks to register: ps:0, worker:0" in records[-1]["message"], records


def test_a_job_logs_json_on_every_task(tmp_path):
    cluster = cluster_file(tmp_path)
    tag = "log-format-%d" % os.getpid()
    env = dict(os.environ, PSTRAIN_TEST_TAG=tag)
    common = ["server", "--cluster", cluster, "--log_format", "json", "--connect_timeout", "30"]
    tasks = []
    try:
        for job in ("ps", "worker"):
            tasks.append(Process(job, [BINARY] + common + ["--job", job, "--task", "0"], env,
                                 str(tmp_path)))
        chief = run(common + ["--job", "chief", "--task", "0", "--hidden", "16", "--epochs",
                              "1", "--data", os.path.join(SOURCE_DIR, "data", "mnist")])
        assert chief.returncode == 0, chief.stderr
        for p in tasks:
            assert p.wait(30) == 0, p.output()
    finally:
        for p in tasks:
            p.kill()
        for pid in tagged_pids(tag):
            os.kill(pid, 9)
    assert json.loads(chief.stdout.splitlines()[-1])["test_accuracy"] > 0.5, chief.stdout
    for p in tasks:
        records = json_records(p.stderr, "%s:0" % p.name)
        assert "serving on" in records[0]["message"], records
        assert "job succeeded" in records[-1]["message"], records
    # Every line of the chief is JSON too, the placement table's newlines inside one message, and
    # its progress lines ("progress epoch 1/1 step ...") under the logger "progress".
    records = json_records(chief.stderr, "chief:0")
    assert any("placement" in x["message"] and "\n" in x["message"] for x in records), records
    progress = [x for x in records if x["logger"] == "progress"]
    assert progress and all(x["message"].startswith("progress ") for x in progress), records


def test_text_format_is_spdlogs_and_other_formats_are_refused(tmp_path):
    cluster = cluster_file(tmp_path)
    argv = ["server", "--cluster", cluster, "--job", "chief", "--task", "0",
            "--connect_timeout", "1"]
    for given in ([], ["--log_format", "text"]):
        r = run(argv + given)
        assert r.returncode == 1, r.stderr
        lines = r.stderr.splitlines()
        assert len(lines) >= 2, r.stderr
        for line in lines[:-1]:
            assert TEXT_LINE.match(line), line
        assert lines[-1].startswith("pstrain chief:0: error: timed out"), lines[-1]
    for bad in ("xml", "JSON", ""):
        r = run(argv + ["--log_format", bad])
        assert r.returncode != 0 and r.returncode != 1, (bad, r.returncode, r.stderr)
        assert "--log_format" in r.stderr, (bad, r.stderr)
        assert "listening" not in r.stderr, r.stderr
