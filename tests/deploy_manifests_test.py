"""Static checks of deploy/: the Kubeflow TFJob and the plain Kubernetes manifests parse as YAML
(Debian's python3-yaml) and hold what the operator and Kubernetes need (and what recovery needs: a
failed task restarted, the chief resuming from a ReadWriteMany claim every PS mounts), every
flag they give `pstrain server` is one it has, their commands run here with their TF_CONFIG
(moved to 127.0.0.1) until they wait for the tasks that do not come, and the Dockerfile builds
the image they name from Debian 12 with the repository's setup script. The restarts themselves
are run across hosts by netns_cluster_test.py.
"""

import json
import os
import posixpath
import re
import shlex
import subprocess
import sys

import pytest
import yaml

sys.path.insert(0, os.path.dirname(__file__))
from pstrain_pytest_cluster import free_ports  # noqa: E402

BINARY = os.environ.get("PSTRAIN_BINARY", "")
SOURCE_DIR = os.environ.get("PSTRAIN_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
DEPLOY = os.path.join(SOURCE_DIR, "deploy")
IMAGE = "pstrain:latest"
GRPC_PORT = 2222
ROLES = {"Chief": ("chief", 1), "PS": ("ps", 2), "Worker": ("worker", 2)}
CLAIM = "pstrain-checkpoints"


def documents(name):
    with open(os.path.join(DEPLOY, "kubernetes", name)) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    assert docs, name + " holds no document"
    return docs


@pytest.fixture(scope="module")
def server_flags():
    """Every --flag that `pstrain server --help` lists."""
    assert BINARY and os.path.exists(BINARY), "PSTRAIN_BINARY=%r is not built" % BINARY
    r = subprocess.run([BINARY, "server", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    flags = set(re.findall(r"(--[a-z0-9_]+)", r.stdout))
    assert {"--auth_token_file", "--log_format", "--data"} <= flags, r.stdout
    return flags


def flag_values(command):
    """["pstrain", "server", "--a=1", "--b", "2"] -> {"--a": "1", "--b": "2"}."""
    assert command[:2] == ["pstrain", "server"], command
    values, args = {}, command[2:]
    i = 0
    while i < len(args):
        assert args[i].startswith("--"), "not a flag: %r in %r" % (args[i], command)
        if "=" in args[i]:
            name, value = args[i].split("=", 1)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            name, value = args[i], args[i + 1]
            i += 1
        else:
            name, value = args[i], None
        assert name not in values, "%s given twice in %r" % (name, command)
        values[name] = value
        i += 1
    return values


def check_pod(pod, server_flags, container_name, chief):
    """A pod template's container: the image, `pstrain server` with flags it has, the gRPC
    and metrics ports, the token Secret mounted where --auth_token_file reads it."""
    spec = pod["spec"]
    assert len(spec["containers"]) == 1, spec
    c = spec["containers"][0]
    assert c["name"] == container_name, c
    assert c["image"] == IMAGE, c
    flags = flag_values(c["command"])
    unknown = set(flags) - server_flags
    assert not unknown, "flags pstrain server does not have: %s" % sorted(unknown)
    assert flags.get("--log_format") in ("text", "json"), flags
    assert ("--data" in flags) == chief, "training flags go to the chief only: %r" % flags
    if chief:
        assert flags["--data"].startswith("/opt/pstrain/data/"), flags  # in the image
    ports = {p["containerPort"]: p["name"] for p in c["ports"]}
    assert GRPC_PORT in ports, c["ports"]
    assert int(flags["--metrics_port"]) in ports, (flags, c["ports"])
    token_dir = posixpath.dirname(flags["--auth_token_file"])
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert token_dir in mounts, (token_dir, mounts)
    volumes = {v["name"]: v for v in spec["volumes"]}
    secret = volumes[mounts[token_dir]]["secret"]
    assert secret["secretName"] == "pstrain-token", secret
    return ports, flags


def check_claim(docs):
    """The PersistentVolumeClaim the chief and the PS share: ReadWriteMany."""
    claims = [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    assert len(claims) == 1 and claims[0]["metadata"]["name"] == CLAIM, claims
    assert claims[0]["spec"]["accessModes"] == ["ReadWriteMany"], claims[0]["spec"]


def check_recovery(pod, role, flags, checkpoint_dirs):
    """A task that fails is restarted; the chief resumes from the claim's volume, which every
    PS mounts at the same path (each writes its part there)."""
    assert pod["spec"]["restartPolicy"] == "OnFailure", pod["spec"]
    c = pod["spec"]["containers"][0]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"]["volumes"]
              if "persistentVolumeClaim" in v}
    shared = {path for path, name in mounts.items() if claims.get(name) == CLAIM}
    if role == "chief":
        assert flags.get("--resume") in shared, (flags, mounts)
        assert "--checkpoint_dir" not in flags and "--restore_from" not in flags, flags
    if role in ("chief", "ps"):
        assert len(shared) == 1, (role, mounts, claims)
        checkpoint_dirs.add(shared.pop())


def test_tfjob_has_the_replicas_the_operator_runs(server_flags):
    docs = documents("tfjob.yaml")
    check_claim(docs)
    jobs = [d for d in docs if d["kind"] != "PersistentVolumeClaim"]
    assert len(jobs) == 1, [d.get("kind") for d in docs]
    job = jobs[0]
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "TFJob", job
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", job["metadata"]["name"]), job
    assert job["spec"]["runPolicy"]["backoffLimit"] > 0, job["spec"]["runPolicy"]
    replicas = job["spec"]["tfReplicaSpecs"]
    assert set(replicas) == set(ROLES), sorted(replicas)
    checkpoint_dirs = set()
    for kind, (role, count) in ROLES.items():
        r = replicas[kind]
        assert r["replicas"] == count, (kind, r["replicas"])
        # A pstrain task that fails is started again and rejoins its job.
        assert r["restartPolicy"] == "OnFailure", (kind, r["restartPolicy"])
        # The operator sets TF_CONFIG on the container named "tensorflow" and takes the
        # cluster's port from the one named "tfjob-port".
        ports, flags = check_pod(r["template"], server_flags, "tensorflow", role == "chief")
        r["template"]["spec"].setdefault("restartPolicy", r["restartPolicy"])
        check_recovery(r["template"], role, flags, checkpoint_dirs)
        assert ports[GRPC_PORT] == "tfjob-port", (kind, ports)
        # The role comes from the operator's TF_CONFIG, not from flags.
        assert "--job" not in flags and "--task" not in flags, (kind, flags)
        env = {e["name"] for e in r["template"]["spec"]["containers"][0].get("env", [])}
        assert "TF_CONFIG" not in env, "the operator sets TF_CONFIG (%s)" % kind
    assert len(checkpoint_dirs) == 1, checkpoint_dirs


def test_plain_manifest_names_its_own_service_and_jobs(server_flags):
    docs = documents("plain.yaml")
    check_claim(docs)
    services = [d for d in docs if d["kind"] == "Service"]
    jobs = [d for d in docs if d["kind"] == "Job"]
    assert len(services) == 1 and len(jobs) + 2 == len(docs), [d["kind"] for d in docs]
    service = services[0]
    assert service["apiVersion"] == "v1", service
    assert service["spec"]["clusterIP"] == "None", "the Service must be headless"
    assert GRPC_PORT in [p["port"] for p in service["spec"]["ports"]], service["spec"]
    selector = service["spec"]["selector"]
    clusters, tasks, checkpoint_dirs = [], set(), set()
    for job in jobs:
        assert job["apiVersion"] == "batch/v1", job["apiVersion"]
        assert job["spec"]["backoffLimit"] > 0, job["metadata"]["name"]
        pod = job["spec"]["template"]
        labels = pod["metadata"]["labels"]
        assert all(labels.get(k) == v for k, v in selector.items()), (selector, labels)
        assert pod["spec"]["subdomain"] == service["metadata"]["name"], pod["spec"]
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        tf_config = json.loads(env["TF_CONFIG"])
        task = tf_config["task"]
        assert job["metadata"]["name"] == "pstrain-%s-%d" % (task["type"], task["index"]), job
        # The task's own address in TF_CONFIG is its pod's DNS name through the Service.
        host = "%s.%s" % (pod["spec"]["hostname"], service["metadata"]["name"])
        own = tf_config["cluster"][task["type"]][task["index"]]
        assert own == "%s:%d" % (host, GRPC_PORT), (own, host)
        _, flags = check_pod(pod, server_flags, "pstrain", task["type"] == "chief")
        check_recovery(pod, task["type"], flags, checkpoint_dirs)
        clusters.append(tf_config["cluster"])
        tasks.add((task["type"], task["index"]))
    assert all(c == clusters[0] for c in clusters), "every Job must name the same cluster"
    assert len(checkpoint_dirs) == 1, checkpoint_dirs
    expected = {(role, i) for role, count in ROLES.values() for i in range(count)}
    assert tasks == expected, sorted(tasks)
    assert {k: len(v) for k, v in clusters[0].items()} == {
        role: count for role, count in ROLES.values()}, clusters[0]


def run_here(container, tf_config, tmp_path):
    """Runs a container's command on this machine: the cluster moved to free ports of
    127.0.0.1, the token and data paths to local ones, a timeout of 1 s. The task must get past
    its flags and TF_CONFIG and fail only for the tasks that do not come."""
    hosts = sorted({h for tasks in json.loads(tf_config)["cluster"].values() for h in tasks})
    for host, port in zip(hosts, free_ports(len(hosts))):
        tf_config = tf_config.replace('"%s"' % host, '"127.0.0.1:%d"' % port)
    token = tmp_path / "token"
    token.write_text("deploy-test-token\n")
    local = {"--auth_token_file": str(token), "--connect_timeout": "1",
             "--metrics_port": str(free_ports(1)[0]),
             "--data": os.path.join(SOURCE_DIR, "data", "mnist"),
             "--resume": str(tmp_path / "checkpoints")}
    argv = [BINARY] + container["command"][1:2]
    for name, value in flag_values(container["command"]).items():
        argv += [name] if value is None else ["%s=%s" % (name, local.get(name, value))]
    r = subprocess.run(argv, env=dict(os.environ, TF_CONFIG=tf_config), capture_output=True,
                       text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 1, (argv, r.returncode, r.stderr)
    assert re.search(r"waiting for tasks to register|gave up waiting for the chief", r.stderr), (
        argv, r.stderr)


def test_the_manifests_commands_start_with_their_tf_config(tmp_path):
    job = [d for d in documents("tfjob.yaml") if d["kind"] == "TFJob"][0]
    for kind, (role, count) in ROLES.items():
        # TF_CONFIG as the operator writes it: a Service name per pod, and "environment".
        name = job["metadata"]["name"]
        cluster = {r: ["%s-%s-%d.default.svc:%d" % (name, r, i, GRPC_PORT) for i in range(n)]
                   for r, n in ROLES.values()}
        tf_config = json.dumps({"cluster": cluster, "task": {"type": role, "index": 0},
                                "environment": "cloud"})
        container = job["spec"]["tfReplicaSpecs"][kind]["template"]["spec"]["containers"][0]
        run_here(container, tf_config, tmp_path)
    for doc in documents("plain.yaml"):
        if doc["kind"] == "Job" and doc["metadata"]["name"] in ("pstrain-chief-0",
                                                                "pstrain-ps-1"):
            container = doc["spec"]["template"]["spec"]["containers"][0]
            env = {e["name"]: e["value"] for e in container["env"]}
            run_here(container, env["TF_CONFIG"], tmp_path)


def dockerfile_instructions():
    """The Dockerfile's instructions as (KEYWORD, argument text), continuations joined."""
    with open(os.path.join(DEPLOY, "Dockerfile")) as f:
        text = re.sub(r"\\\n", " ", f.read())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def test_dockerfile_builds_the_image_from_debian_12_with_the_setup_script():
    steps = dockerfile_instructions()
    assert steps[0] == ("FROM", "debian:12"), steps[0]
    known = {"FROM", "ENV", "WORKDIR", "COPY", "RUN", "EXPOSE", "ENTRYPOINT", "CMD", "ARG"}
    assert {k for k, _ in steps} <= known, steps
    copies = [shlex.split(a) for k, a in steps if k == "COPY"]
    assert copies == [[".", "/opt/pstrain"]], copies  # setup.sh puts MNIST in data/mnist
    assert ("WORKDIR", "/opt/pstrain") in steps, steps
    run = " && ".join(a for k, a in steps if k == "RUN")
    assert "scripts/setup.sh demo" in run, run
    assert "make install" in run, run
    assert os.path.exists(os.path.join(SOURCE_DIR, "scripts", "setup.sh"))
    entrypoint = [json.loads(a) for k, a in steps if k == "ENTRYPOINT"]
    assert entrypoint == [["pstrain"]], entrypoint
    exposed = {int(p) for k, a in steps if k == "EXPOSE" for p in a.split()}
    assert GRPC_PORT in exposed, exposed
