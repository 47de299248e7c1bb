#!/usr/bin/python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/: a handful of small
valid inputs each, in the input layout each target's header comment describes. Run it again after
a wire or file format changes; the corpora are committed, so `make fuzz` needs no Python.

  /usr/bin/python3 fuzz/make_seeds.py
"""

import gzip
import importlib
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "fuzz", "corpus")
SEPARATOR = b"\n--next--\n"  # fuzz_util.h kSeparator
PROTOS = ["tensor", "ps", "master", "worker", "stream"]


def messages():
    """The generated Python messages of proto/, by proto name (protoc, as the C++ build runs it)."""
    out = tempfile.mkdtemp(prefix="pstrain-seeds-")
    files = [os.path.join(ROOT, "proto", p + ".proto") for p in PROTOS]
    subprocess.run(["protoc", "-I", ROOT, "--python_out=" + out] + files, check=True)
    sys.path.insert(0, out)
    mods = {p: importlib.import_module("proto." + p + "_pb2") for p in PROTOS}
    shutil.rmtree(out)
    return mods


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def floats(n, start=0.0):
    return struct.pack("<%df" % n, *[start + 0.25 * i for i in range(n)])


def varint(v):
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def push_request(pb, shapes, with_data=True, dtype=1):
    req = pb["ps"].PushRequest()
    req.sender.job = "worker"
    req.sender.task = 1
    req.sender.incarnation = 42
    req.tag.epoch = 0
    req.tag.task = 3
    req.tag.batch = 7
    for i, shape in enumerate(shapes):
        g = req.gradients.add()
        g.name = "layer%d/w" % i
        g.read_version = 5 * i
        g.gradient.dtype = dtype
        g.gradient.shape.extend(shape)
        n = 1
        for d in shape:
            n *= d
        if with_data:
            g.gradient.data = floats(n, i) if dtype == 1 else b"\x00\x3c" * n
    return req


def wire_seeds(pb):
    for i, (pattern, shapes) in enumerate([(0, [[2, 3]]), (0x5A, [[2, 3], [], [0], [40]]),
                                           (1, [[5], [1, 7]])]):
        write("grpc_wire_fuzz", "push-%d" % i,
              bytes([pattern]) + push_request(pb, shapes).SerializeToString())
    write("grpc_wire_fuzz", "push-half", b"\x03" + push_request(pb, [[4]], dtype=2)
          .SerializeToString())


def stream_seeds(pb):
    def chunk(index, offset, data):
        c = pb["stream"].PushChunk()
        c.index, c.offset, c.data = index, offset, data
        return c.SerializeToString()

    for i, (pattern, shapes) in enumerate([(0, [[2, 3]]), (0x33, [[4], [0], [3, 2]])]):
        head = pb["stream"].PushChunk()
        head.head.CopyFrom(push_request(pb, shapes, with_data=False))
        chunks = [head.SerializeToString()]
        for k, shape in enumerate(shapes):
            n = 1
            for d in shape:
                n *= d
            data = floats(n, k)
            if len(data) > 8:  # two chunks, as a large tensor travels
                chunks += [chunk(k, 0, data[:8]), chunk(k, 8, data[8:])]
            elif data:
                chunks.append(chunk(k, 0, data))
        write("stream_chunks_fuzz", "push-%d" % i, bytes([pattern]) + SEPARATOR.join(chunks))


def tensor_seeds(pb):
    def tensor(shape, data, dtype=1):
        t = pb["tensor"].TensorProto()
        t.dtype = dtype
        t.shape.extend(shape)
        t.data = data
        return t.SerializeToString()

    write("tensor_codec_fuzz", "matrix", b"\x00" + tensor([2, 3], floats(6)))
    write("tensor_codec_fuzz", "scalar", b"\x00" + tensor([], floats(1)))
    write("tensor_codec_fuzz", "empty", b"\x02" + tensor([0, 4], b""))
    head = tensor([3], b"", dtype=2)
    write("tensor_codec_fuzz", "half-out-of-line", b"\x01" + varint(len(head)) + head + b"\x00\x3c" * 3)
    head = tensor([2, 2], b"")
    write("tensor_codec_fuzz", "float-out-of-line", b"\x01" + varint(len(head)) + head + floats(4))


def raw_call_seeds(pb):
    # The order of the target's types: each service's methods' inputs, then their outputs.
    services = [("ps", "ParameterServerService"), ("master", "MasterService"),
                ("worker", "WorkerService"), ("stream", "TensorStreamService")]
    inputs, outputs = [], []
    for proto, name in services:
        for m in pb[proto].DESCRIPTOR.services_by_name[name].methods:
            inputs.append(m.input_type.full_name)
            outputs.append(m.output_type.full_name)
    types = inputs + outputs

    def msg(name):
        for m in pb.values():
            short = name.split(".")[-1]
            if short in m.DESCRIPTOR.message_types_by_name:
                return getattr(m, short)()
        raise KeyError(name)

    push = push_request(pb, [[2, 2], [3]])
    pull = msg("pstrain.PullRequest")
    pull.sender.job, pull.sender.task = "worker", 0
    pull.names.extend(["layer0/w", "layer1/b"])
    register = msg("pstrain.RegisterRequest")
    register.sender.job, register.sender.task = "ps", 1
    for i, (pattern, m) in enumerate([(0, push), (0x21, pull), (0, register)]):
        index = types.index(m.DESCRIPTOR.full_name)
        write("raw_call_fuzz", "call-%d" % i, bytes([pattern, index]) + m.SerializeToString())


def part_seeds():
    def string(s):
        s = s.encode() if isinstance(s, str) else s
        return struct.pack("<Q", len(s)) + s

    def array(fmt, items):
        return struct.pack("<Q", len(items)) + struct.pack("<%d%s" % (len(items), fmt), *items)

    def watermarks(items):
        return struct.pack("<Q", len(items)) + b"".join(struct.pack("<iqq", *w) for w in items)

    def record(kind, payload):
        return struct.pack("<BQ", kind, len(payload)) + payload

    def header(version, ps_task=0, num_ps=1, step=100):
        return b"PSTCKPT\n" + struct.pack("<IIIQ", version, ps_task, num_ps, step)

    values = [0.5, -1.0, 2.0, 0.25]
    shard = (string("w") + string("w") + array("q", [2, 2]) + struct.pack("<qqQq", 0, 2, 9, 3) +
             string("adam") + string(b"\x0a\x04adam") + array("f", values) +
             struct.pack("<Q", 2) + string("m") + array("f", values) + string("v") +
             array("f", values))
    table = (string("emb") + string(b"\x0a\x03emb\x10\x02") + struct.pack("<iiQ", 2, 2, 4) +
             array("Q", [7, 11]) + array("f", [0.1, 0.2, 0.3, 0.4]) + array("I", []) +
             array("Q", [1, 2]))
    write("checkpoint_part_fuzz", "v2-shard-table",
          header(2) + record(1, shard + watermarks([(0, 3, 5)])) +
          record(2, table + watermarks([(1, 0, 2), (1, 4, 0)])))
    write("checkpoint_part_fuzz", "v1-shard", header(1, 1, 2, 7) + record(1, shard))
    write("checkpoint_part_fuzz", "v2-empty", header(2, 0, 1, 0))


def manifest_seeds():
    m = {"format": "pstrain-checkpoint", "format_version": 2, "global_step": 120, "num_ps": 2,
         "files": [{"name": "ps-0.ckpt", "bytes": 1234, "xxh3": "00000000deadbeef"},
                   {"name": "ps-1.ckpt", "bytes": 999, "xxh3": "0123456789abcdef"}],
         "variables": [{"name": "w", "shape": [784, 10]}, {"name": "b", "shape": [10]}],
         "tables": [{"name": "emb", "dim": 8}]}
    write("checkpoint_manifest_fuzz", "two-ps", json.dumps(m, indent=2) + "\n")
    m["ledger"] = {"epoch": 1, "tasks": [{"task": 0, "next_batch": 3}]}
    m["format_version"] = 1
    write("checkpoint_manifest_fuzz", "with-ledger", json.dumps(m))


def cluster_seeds():
    cluster = {"chief": ["localhost:2222"], "ps": ["localhost:2223", "localhost:2224"],
               "worker": ["localhost:2225"]}
    write("cluster_spec_fuzz", "no-task", json.dumps({"cluster": cluster}))
    write("cluster_spec_fuzz", "ps-1", json.dumps({"cluster": cluster,
                                                   "task": {"type": "ps", "index": 1}}))
    cluster["evaluator"] = ["10.0.0.5:80"]
    write("cluster_spec_fuzz", "evaluator", json.dumps({"cluster": cluster,
                                                        "task": {"type": "worker", "index": 0}},
                                                       indent=1))


def feature_seeds():
    schema = {"label": "y", "task": "classification", "columns": [
        {"name": "a", "type": "numeric", "normalizer": "standardize", "missing_indicator": True},
        {"name": "b", "type": "numeric", "normalizer": "log1p"},
        {"name": "s", "type": "categorical", "encoding": "vocabulary"},
        {"name": "h", "type": "categorical", "encoding": "hash", "hash_buckets": 16},
        {"name": "c", "type": "categorical", "encoding": "identity", "num_ids": 4},
        {"name": "k", "type": "bucketized", "buckets": 3}],
        "crosses": [{"columns": ["s", "c"], "hash_buckets": 8}]}
    rows = [b"y,a,b,s,h,c,k", b"1,0.5,10,x,\"q, r\",1,3", b"0,,2,y,z,0,", b"1,2,-3,x,NA,3,7",
            b"2,1,1,w,z,2,5"]
    write("feature_schema_fuzz", "every-kind", json.dumps(schema).encode() + SEPARATOR +
          SEPARATOR.join(rows))
    regression = dict(schema, task="regression", crosses=[])
    write("feature_schema_fuzz", "regression", json.dumps(regression).encode() + SEPARATOR +
          SEPARATOR.join(rows))
    write("feature_schema_fuzz", "schema-only", json.dumps(schema).encode())
    yaml = ("label: y\ntask: classification\ncolumns:\n"
            "  - {name: a, type: numeric, normalizer: standardize, missing_indicator: true}\n"
            "  - name: s\n    type: categorical\n    encoding: vocabulary\n    embedding_dim: 4\n"
            "  - &h {name: h, type: categorical, encoding: hash, hash_buckets: 16}\n"
            "  - {name: k, type: bucketized, buckets: 3}\n"
            "crosses:\n  - {columns: [s, h], hash_buckets: 8}\n")
    write("feature_schema_yaml_fuzz", "every-kind", yaml)
    write("feature_schema_yaml_fuzz", "flow", json.dumps(schema))  # JSON is YAML too


def text_seeds():
    # The first byte is the target's option byte (text_fuzzing.h TextOptionsFrom): 0x70 reads
    # every record and stops at a bad line, 0x71 skips bad lines, 0x32 reads records [1, 4).
    csv = "label,x1,x2\n1,0.5,2\n0,-1e3,7.25\n\n1,3,4\n"
    write("csv_fuzz", "header", b"\x70" + csv.encode())
    write("csv_fuzz", "no-header-tabs", b"\xf1" + b"0\t1.5\t2\n1\t2.5\t-3\r\n")
    write("csv_fuzz", "range-gzip", b"\x32" + gzip.compress(csv.encode(), mtime=0))
    libsvm = "1 1:0.5 3:1.25 10:-2\n0 2:1 # a comment\n-1\n1 4:2e-3\n"
    write("libsvm_fuzz", "rows", b"\x70" + libsvm.encode())
    write("libsvm_fuzz", "skip-bad", b"\x71" + (libsvm + "1 3:1 2:1\n").encode())
    write("libsvm_fuzz", "range-gzip", b"\x32" + gzip.compress(libsvm.encode(), mtime=0))
    # As a table of columns: two classes, indices from 0, tabs, a column of few integers.
    table = "1 0:0.5 2:3\t4:1\n0\t1:2 2:1 # x\n1 2:2 4:1\n0 0:-1.5 2:3\n"
    write("libsvm_table_fuzz", "rows", b"\x70" + table.encode())
    write("libsvm_table_fuzz", "skip-bad", b"\x71" + (table + "1 3:1 2:1\n0 1:x\n").encode())
    write("libsvm_table_fuzz", "range-gzip", b"\x32" + gzip.compress(table.encode(), mtime=0))
    cats = "\t".join(["68fd1e64", "", "05db9164"] + ["%08x" % (i * 7919) for i in range(23)])
    row1 = "\t".join(["1", "5", "", "-1", "0", "12"] + ["3"] * 8) + "\t" + cats
    row0 = "\t".join(["0"] + [""] * 13 + [""] * 26)
    criteo = row1 + "\n" + row0 + "\n"
    write("criteo_fuzz", "rows", b"\x70" + criteo.encode())
    write("criteo_fuzz", "skip-bad", b"\x71" + (criteo + "2\tx\n").encode())
    write("criteo_fuzz", "range-gzip", b"\x32" + gzip.compress(criteo.encode(), mtime=0))


def idx_seeds():
    labels = b"\x00\x00\x08\x01" + struct.pack(">I", 5) + bytes([0, 1, 2, 3, 9])
    images = b"\x00\x00\x08\x03" + struct.pack(">III", 2, 3, 3) + bytes(range(18))
    write("idx_fuzz", "labels", labels)
    write("idx_fuzz", "images", images)
    write("idx_fuzz", "images-gzip", gzip.compress(images, mtime=0))
    # A finding kept as a seed: a zero dimension after huge ones (the size must not overflow).
    write("idx_fuzz", "zero-dimension-after-huge-ones", bytes.fromhex(
        "00000808ff030605070a04090bffffff1f8b08000000000002036360e060666022000000"))


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    pb = messages()
    wire_seeds(pb)
    stream_seeds(pb)
    tensor_seeds(pb)
    raw_call_seeds(pb)
    part_seeds()
    manifest_seeds()
    cluster_seeds()
    feature_seeds()
    text_seeds()
    idx_seeds()
    for t in sorted(os.listdir(CORPUS)):
        print("%s: %d seeds" % (t, len(os.listdir(os.path.join(CORPUS, t)))))


if __name__ == "__main__":
    main()
