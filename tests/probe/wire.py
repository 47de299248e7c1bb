"""The wire as an outside client sees it: messages generated from proto/ and calls by method path.

Stubs are generated into a temporary directory when first needed. Calls go through a generic
unary-unary callable per method, so the same code sends a message or raw bytes that do not parse.
"""

import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile

import grpc

PROTOS = ("tensor", "ps", "worker", "master")
SERVICES = ("pstrain.MasterService", "pstrain.ParameterServerService", "pstrain.WorkerService")

# Codes a server may answer with for a request it refuses; each names a documented reason.
REFUSALS = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.ALREADY_EXISTS,
    grpc.StatusCode.OUT_OF_RANGE,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNAUTHENTICATED,
}

_modules = None


def _generate(out_dir):
    """Runs grpc_tools' protoc, or the system protoc when grpc_tools' bundled one is too old.

    Debian 12's python3-grpc-tools (1.14) bundles a protoc that rejects proto3 `optional`, which
    proto/ uses; protobuf-compiler (the one the C++ build uses) matches python3-protobuf.
    """
    source = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))
    proto_dir = os.path.join(source, "proto")
    files = [os.path.join(proto_dir, p + ".proto") for p in PROTOS]
    tried = []
    for cmd in ([sys.executable, "-m", "grpc_tools.protoc"], ["protoc"]):
        # From the repository root, as the C++ build: the files import "proto/<name>.proto".
        r = subprocess.run(cmd + ["-I", source, "--python_out=" + out_dir] + files,
                           capture_output=True, text=True)
        if r.returncode == 0:
            return
        tried.append("%s: %s" % (" ".join(cmd), r.stderr.strip().splitlines()[:1]))
    raise RuntimeError("cannot generate Python messages from %s: %s" % (proto_dir, tried))


def modules():
    """The generated message modules by proto name (tensor, ps, worker, master)."""
    global _modules
    if _modules is None:
        out_dir = tempfile.mkdtemp(prefix="pstrain-probe-stubs-")
        # Removed when the process exits, so a run leaves nothing in $TMPDIR.
        atexit.register(shutil.rmtree, out_dir, True)
        _generate(out_dir)
        sys.path.insert(0, out_dir)
        _modules = {p: importlib.import_module("proto." + p + "_pb2") for p in PROTOS}
    return _modules


def pb(name):
    """The message class pstrain.<name>."""
    for m in modules().values():
        if name in m.DESCRIPTOR.message_types_by_name:
            return getattr(m, name)
    raise KeyError(name)


def methods(service):
    """(name, request class, response class) of every method of `service`, in proto order."""
    for m in modules().values():
        s = m.DESCRIPTOR.services_by_name.get(service.split(".")[-1])
        if s is not None:
            return [(x.name, pb(x.input_type.name), pb(x.output_type.name)) for x in s.methods]
    raise KeyError(service)


def sender(job, task, incarnation):
    return pb("Sender")(job=job, task=task, incarnation=incarnation)


class Outcome:
    """What one call got: its status code and details, and the parsed response if OK."""

    def __init__(self, code, details, response=None):
        self.code, self.details, self.response = code, details or "", response

    @property
    def ok(self):
        return self.code == grpc.StatusCode.OK

    def __repr__(self):
        return "%s %r" % (self.code.name, self.details[:300])


class Peer:
    """One server's address: calls any method of one service with a deadline on every call."""

    def __init__(self, address, service):
        self.address, self.service = address, service
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)])
        self.responses = {name: resp for name, _, resp in methods(service)}
        self._calls = {}

    def close(self):
        self.channel.close()

    def _callable(self, method):
        if method not in self._calls:
            self._calls[method] = self.channel.unary_unary(
                "/%s/%s" % (self.service, method), request_serializer=lambda b: b,
                response_deserializer=lambda b: b)
        return self._calls[method]

    def call(self, method, request, timeout=10.0):
        """Sends `request` (a message, or bytes sent as they are); never raises for a status."""
        data = request if isinstance(request, bytes) else request.SerializeToString()
        try:
            raw = self._callable(method)(data, timeout=timeout)
        except grpc.RpcError as e:
            return Outcome(e.code(), e.details())
        resp = self.responses[method]()
        try:
            resp.ParseFromString(raw)
        except Exception as e:  # a reply that does not parse is the server's fault
            return Outcome(grpc.StatusCode.DATA_LOSS, "reply does not parse: %s" % e)
        return Outcome(grpc.StatusCode.OK, "", resp)
