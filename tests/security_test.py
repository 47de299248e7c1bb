"""Security between tasks, probed from outside: the job token on every call, and mutual TLS.

A real cluster on 127.0.0.1 (probe/cluster.py: chief `--model external`, ps:0 and worker 1 as
`pstrain server` processes, the test as worker 0) gets its security from the environment
(PSTRAIN_AUTH_TOKEN, PSTRAIN_TLS_CERT/KEY/CA) with certificates from `pstrain gen-certs`. A
foreign grpcio client then pushes a gradient with every kind of wrong credentials: each push must
fail with the expected status, the servers keep serving, and the variable keeps its value and
version, read back with the right credentials. The PS logs each refusal.
"""

import collections
import os
import struct
import subprocess
import tempfile

import grpc
import pytest

from probe import wire
from probe.cluster import Cluster
from probe.wire import pb

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
TOKEN = "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2"
C = grpc.StatusCode
VAR = "probe/small"
SECURITY_ENV = ("PSTRAIN_AUTH_TOKEN", "PSTRAIN_AUTH_TOKEN_FILE", "PSTRAIN_TLS_CERT",
                "PSTRAIN_TLS_KEY", "PSTRAIN_TLS_CA")


def gen_certs(out, *args):
    """Runs `pstrain gen-certs --out out ARGS`; the PEM texts by file name."""
    r = subprocess.run([BINARY, "gen-certs", "--out", out] + list(args), capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 0, "gen-certs %s: %s" % (args, r.stderr)
    pems = {}
    for name in ("ca.pem", "cert.pem", "key.pem"):
        with open(os.path.join(out, name), "rb") as f:
            pems[name] = f.read()
    return pems


class _Details(collections.namedtuple(
        "_Details", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                     "compression")), grpc.ClientCallDetails):
    pass


class _WithToken(grpc.UnaryUnaryClientInterceptor):
    """Adds `authorization: Bearer <token>` to every call, as pstrain's own channels do."""

    def __init__(self, token):
        self.token = token

    def intercept_unary_unary(self, continuation, d, request):
        metadata = list(d.metadata or []) + [("authorization", "Bearer " + self.token)]
        return continuation(_Details(d.method, d.timeout, metadata, d.credentials,
                                     d.wait_for_ready, d.compression), request)


class Peer(wire.Peer):
    """wire.Peer over TLS with `creds` (None: plaintext), carrying `token` (None: no token)."""

    def __init__(self, address, service, creds=None, token=None):
        options = [("grpc.max_receive_message_length", -1)]
        self.address, self.service = address, service
        self.channel = (grpc.secure_channel(address, creds, options=options) if creds
                        else grpc.insecure_channel(address, options=options))
        if token is not None:
            self.channel = grpc.intercept_channel(self.channel, _WithToken(token))
        self.responses = {name: resp for name, _, resp in wire.methods(service)}
        self._calls = {}


class SecureCluster(Cluster):
    """The probe's cluster with its security from the environment, and the test's peers with
    `creds` and `token`."""

    def start(self, creds=None, token=None):
        super().start()
        for p in self.peers.values():
            p.close()
        self.master = Peer(self.addr["chief"], "pstrain.MasterService", creds, token)
        self.ps = Peer(self.addr["ps:0"], "pstrain.ParameterServerService", creds, token)
        self.worker = Peer(self.addr["worker:1"], "pstrain.WorkerService", creds, token)
        self.peers = {p.service: p for p in (self.master, self.ps, self.worker)}

    def push_request(self):
        """A gradient of ones for VAR from worker 0: applied, it changes the variable."""
        version = self.pull([VAR])[VAR][0]
        grad = pb("TensorProto")(dtype=1, shape=[3, 2], data=struct.pack("<6f", *[1.0] * 6))
        return pb("PushRequest")(sender=self.me, gradients=[
            pb("Gradient")(name=VAR, read_version=version, gradient=grad)])

    def pushes(self):
        return sum(self.stats().pushes_by_worker)

    def ps_log(self):
        with open(self.tasks["ps:0"].err_path, errors="replace") as f:
            return f.read()


@pytest.fixture
def tmp():
    if not BINARY or not os.path.exists(BINARY):
        pytest.fail("PSTRAIN_BINARY=%r is not a built pstrain binary" % BINARY)
    with tempfile.TemporaryDirectory(prefix="pstrain-security-") as d:
        yield d


def start_cluster(tmp, monkeypatch, env, creds, token):
    """A cluster whose servers get `env`; registered as worker 0, with VAR created."""
    for name in SECURITY_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    c = SecureCluster(tmp, BINARY, SOURCE_DIR)
    c.start(creds, token)
    for name in env:  # the test's own process stays out of it
        monkeypatch.delenv(name)
    c.register()
    c.wait_configured()
    c.create_variable(VAR, [3, 2], "constant", value=1.5)
    return c


def expect_refused(c, what, peer, codes, push):
    """`peer`'s push fails with one of `codes`, the servers live, and nothing was applied."""
    before, pushes = c.pull([VAR]), c.pushes()
    out = peer.call("Push", push, timeout=10)
    peer.close()
    assert out.code in codes, "%s: got %r, expected %s" % (what, out, [x.name for x in codes])
    c.check_alive(what)
    assert c.pull([VAR]) == before, "%s: the variable changed" % what
    assert c.pushes() == pushes, "%s: the PS counted a push" % what


def expect_applied(c, push):
    before = c.pull([VAR])[VAR]
    out = c.ps.call("Push", push)
    assert out.ok, "the push with the right credentials: %r" % out
    after = c.pull([VAR])[VAR]
    assert after[0] > before[0] and after[3] != before[3], "the right push was not applied"


def test_mutual_tls_and_token_refuse_every_wrong_credential(tmp, monkeypatch):
    pems = gen_certs(os.path.join(tmp, "good"), "--hosts", "127.0.0.1,localhost", "--days", "2")
    other = gen_certs(os.path.join(tmp, "other"))
    good = os.path.join(tmp, "good")
    expired = gen_certs(os.path.join(tmp, "expired"), "--days", "-1", "--ca_cert",
                        os.path.join(good, "ca.pem"), "--ca_key", os.path.join(good, "ca.key"))
    token_file = os.path.join(tmp, "token")
    with open(token_file, "w") as f:
        f.write(TOKEN + "\n")
    env = {"PSTRAIN_AUTH_TOKEN_FILE": token_file,
           "PSTRAIN_TLS_CERT": os.path.join(good, "cert.pem"),
           "PSTRAIN_TLS_KEY": os.path.join(good, "key.pem"),
           "PSTRAIN_TLS_CA": os.path.join(good, "ca.pem")}

    def tls(client=pems, ca=pems):
        if client is None:
            return grpc.ssl_channel_credentials(root_certificates=ca["ca.pem"])
        return grpc.ssl_channel_credentials(ca["ca.pem"], client["key.pem"], client["cert.pem"])

    c = start_cluster(tmp, monkeypatch, env, tls(), TOKEN)
    try:
        push = c.push_request()
        ps = c.addr["ps:0"]
        service = "pstrain.ParameterServerService"
        cases = [
            ("no token", Peer(ps, service, tls(), None), {C.UNAUTHENTICATED}),
            ("a wrong token", Peer(ps, service, tls(), TOKEN[:-1] + "0"), {C.UNAUTHENTICATED}),
            ("no client certificate", Peer(ps, service, tls(client=None), TOKEN),
             {C.UNAVAILABLE}),
            ("a certificate of another CA", Peer(ps, service, tls(client=other), TOKEN),
             {C.UNAVAILABLE}),
            ("an expired certificate", Peer(ps, service, tls(client=expired), TOKEN),
             {C.UNAVAILABLE}),
            ("a server it cannot verify", Peer(ps, service, tls(client=other, ca=other), TOKEN),
             {C.UNAVAILABLE}),
            ("plaintext", Peer(ps, service, None, TOKEN), {C.UNAVAILABLE}),
        ]
        for what, peer, codes in cases:
            expect_refused(c, what, peer, codes, push)
        expect_applied(c, push)
        log = c.ps_log()
        for why in ("carries no job token", "carries a wrong job token"):
            assert "refused Push from ipv4:127.0.0.1:" in log and why in log, (
                "ps:0 did not log a refusal naming the peer (%s):\n%s" % (why, log[-3000:]))
        assert "TLS handshake failed" in log, (
            "ps:0 did not log the failed handshakes:\n%s" % log[-3000:])
    finally:
        c.kill_all()


def test_plaintext_cluster_with_a_token(tmp, monkeypatch):
    c = start_cluster(tmp, monkeypatch, {"PSTRAIN_AUTH_TOKEN": TOKEN}, None, TOKEN)
    try:
        push = c.push_request()
        ps = c.addr["ps:0"]
        service = "pstrain.ParameterServerService"
        expect_refused(c, "no token", Peer(ps, service), {C.UNAUTHENTICATED}, push)
        expect_refused(c, "a wrong token", Peer(ps, service, None, "x" * len(TOKEN)),
                       {C.UNAUTHENTICATED}, push)
        master = Peer(c.addr["chief"], "pstrain.MasterService")
        out = master.call("Register", pb("RegisterRequest")(sender=c.me,
                                                             address=c.addr["worker:0"]))
        master.close()
        assert out.code == C.UNAUTHENTICATED, "Register without a token: %r" % out
        expect_applied(c, push)
    finally:
        c.kill_all()


def test_gen_certs_names_every_host_and_refuses_bad_input(tmp):
    out = os.path.join(tmp, "c")
    gen_certs(out, "--hosts", "10.1.2.3,node-2.example.com,::1", "--days", "30")
    text = subprocess.run(["openssl", "x509", "-in", os.path.join(out, "cert.pem"), "-noout",
                           "-text"], capture_output=True, text=True, check=True).stdout
    for name in ("IP Address:127.0.0.1", "DNS:localhost", "IP Address:10.1.2.3",
                 "DNS:node-2.example.com", "TLS Web Client Authentication"):
        assert name in text, "the certificate lacks %s:\n%s" % (name, text)
    verify = subprocess.run(["openssl", "verify", "-CAfile", os.path.join(out, "ca.pem"),
                             os.path.join(out, "cert.pem")], capture_output=True, text=True)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    for key in ("ca.key", "key.pem"):
        mode = os.stat(os.path.join(out, key)).st_mode
        assert mode & 0o077 == 0, "%s is readable by others: %o" % (key, mode)
    bad = [(["--hosts", "a b"], 'host "a b" is neither an IP address nor a DNS name'),
           (["--days", "0"], "0 days of validity"),
           (["--ca_cert", os.path.join(out, "ca.pem")], "--ca_cert and --ca_key go together"),
           (["--ca_cert", os.path.join(out, "cert.pem"), "--ca_key", os.path.join(out, "key.pem")],
            "is not one of a CA"),
           (["--ca_cert", os.path.join(out, "ca.pem"), "--ca_key", os.path.join(out, "key.pem")],
            "does not belong to the CA certificate")]
    for args, message in bad:
        r = subprocess.run([BINARY, "gen-certs", "--out", os.path.join(tmp, "bad")] + args,
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and message in r.stderr, "gen-certs %s: %d %s" % (
            args, r.returncode, r.stderr)
    r = subprocess.run([BINARY, "launch", "--auth_token_file", os.path.join(tmp, "none")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--auth_token_file: cannot read" in r.stderr, r.stderr
