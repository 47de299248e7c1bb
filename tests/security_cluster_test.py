"""`pstrain launch --tls`: the MNIST demo job with mutual TLS and a job token between all tasks.

The launch makes a throw-away CA, a certificate and a token in its log directory, gives each task
a metrics port, and trains the demo's MLP to the demo's accuracy. While it trains, a foreign
client finds the chief's port TLS-only and token-checked: plaintext fails, TLS with the launch's
certificate but a wrong token is refused, and with both it reaches the handler.
"""

import json
import os
import re
import subprocess
import tempfile
import time

import grpc
import pytest

from probe import cluster

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
# The Makefile's demo job, for 2 epochs instead of 3.
DEMO = ["--ps", "2", "--workers", "2", "--hidden", "256,128", "--optimizer", "adam", "--lr",
        "0.001", "--lr_schedule", "cosine", "--batch", "64", "--epochs", "2", "--mode", "async"]
GARBAGE = b"\xff\xff\xff\xff\x0f"  # a field tag past the largest field number: never parses
C = grpc.StatusCode


def call_chief(address, creds, token):
    """A Register that does not parse, sent to the chief: the status it gets."""
    channel = (grpc.secure_channel(address, creds) if creds else grpc.insecure_channel(address))
    try:
        register = channel.unary_unary("/pstrain.MasterService/Register",
                                       request_serializer=lambda b: b,
                                       response_deserializer=lambda b: b)
        register(GARBAGE, timeout=10, metadata=[("authorization", "Bearer " + token)])
        return C.OK
    except grpc.RpcError as e:
        return e.code()
    finally:
        channel.close()


def wait_for(path, pattern, proc, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(path, errors="replace") as f:
            m = re.search(pattern, f.read())
        if m:
            return m
        assert proc.poll() is None, "launch exited %d before %r" % (proc.returncode, pattern)
        time.sleep(0.2)
    raise AssertionError("no %r in %s within %ds" % (pattern, path, timeout))


def test_launch_with_tls_trains_the_demo_to_its_accuracy():
    if not BINARY or not os.path.exists(BINARY):
        pytest.fail("PSTRAIN_BINARY=%r is not a built pstrain binary" % BINARY)
    tag = "%d-%d" % (os.getpid(), time.monotonic_ns())
    env = dict(os.environ, PSTRAIN_PROBE_TAG=tag)
    with tempfile.TemporaryDirectory(prefix="pstrain-tls-launch-") as tmp:
        logs = os.path.join(tmp, "logs")
        out_path, err_path = os.path.join(tmp, "out"), os.path.join(tmp, "err")
        argv = [BINARY, "launch", "--tls", "--metrics", "--log_dir", logs, "--data",
                os.path.join(SOURCE_DIR, "data", "mnist")] + DEMO
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=err)
        try:
            chief = wait_for(err_path, r"chief listening on (127\.0\.0\.1:\d+)", proc).group(1)
            with open(os.path.join(logs, "auth_token")) as f:
                token = f.read().strip()
            pems = {}
            for name in ("ca.pem", "cert.pem", "key.pem"):
                with open(os.path.join(logs, "tls", name), "rb") as f:
                    pems[name] = f.read()
            creds = grpc.ssl_channel_credentials(pems["ca.pem"], pems["key.pem"],
                                                 pems["cert.pem"])
            assert call_chief(chief, None, token) == C.UNAVAILABLE, "plaintext reached the chief"
            assert call_chief(chief, creds, "0" * 64) == C.UNAUTHENTICATED
            assert call_chief(chief, creds, token) == C.INVALID_ARGUMENT
            proc.wait(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            left = cluster.tagged_processes(tag)
            for pid in left:
                os.kill(pid, 9)
        with open(out_path) as f:
            out = f.read()
        with open(err_path) as f:
            err = f.read()
        assert proc.returncode == 0, "launch exited %d:\n%s" % (proc.returncode, err[-3000:])
        assert not left, "processes left running: %s" % left
        result = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
        assert result["test_accuracy"] >= 0.970, result
        assert re.fullmatch(r"[0-9a-f]{64}", token), token
        assert "status page: http://127.0.0.1:%s/?token=%s" % (
            re.search(r"chief:0 metrics: http://127\.0\.0\.1:(\d+)/metrics", err).group(1),
            token) in err, err[:2000]
        ports = re.findall(r"pstrain launch: (\S+) metrics: http://127\.0\.0\.1:(\d+)/metrics", err)
        assert sorted(t for t, _ in ports) == ["chief:0", "ps:0", "ps:1", "worker:0", "worker:1"]
        assert len({p for _, p in ports}) == 5, ports
        for secret in ("auth_token", "tls/key.pem"):
            mode = os.stat(os.path.join(logs, secret)).st_mode
            assert mode & 0o077 == 0, "%s is readable by others: %o" % (secret, mode)
        assert not os.path.exists(os.path.join(logs, "tls", "ca.key")), "the CA's key was kept"


def test_launch_with_tls_runs_a_python_worker_command(tmp_path):
    """A Python script as every worker takes the launch's token and certificates from the
    environment (PSTRAIN_AUTH_TOKEN, PSTRAIN_TLS_*) and trains through the TLS-only cluster."""
    if not BINARY or not os.path.exists(BINARY):
        pytest.fail("PSTRAIN_BINARY=%r is not a built pstrain binary" % BINARY)
    tag = "%d-%d" % (os.getpid(), time.monotonic_ns())
    env = dict(os.environ, PSTRAIN_PROBE_TAG=tag, TMPDIR=str(tmp_path))
    env.pop("TF_CONFIG", None)
    example = os.path.join(SOURCE_DIR, "examples", "python", "linear_numpy.py")
    argv = [BINARY, "launch", "--tls", "--ps", "1", "--workers", "2", "--", "/usr/bin/python3",
            example, "--steps", "50"]
    try:
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    finally:
        left = cluster.tagged_processes(tag)
        for pid in left:
            os.kill(pid, 9)
    assert r.returncode == 0, "launch exited %d:\n%s" % (r.returncode, r.stderr[-3000:])
    assert not left, "processes left running: %s" % left
    for task in ("worker:0", "worker:1"):
        assert "pstrain launch: %s result: {" % task in r.stderr, r.stderr[-3000:]
    logs = [d for d in os.listdir(tmp_path) if d.startswith("pstrain-launch-")]
    assert len(logs) == 1, logs
    assert os.path.exists(os.path.join(tmp_path, logs[0], "tls", "cert.pem"))
