#!/usr/bin/env bash
# Runs a benchmark binary (ps_bench or sparse_bench, built beforehand, e.g. by `make build`) with
# 5 repetitions and prints the medians and the ratio of each benchmark to its baseline; the same
# table replaces that binary's section ("# <binary> results") of bench/results.md.
#
#   bash bench/run.sh [path/to/ps_bench]     (default build/bench/ps_bench)
#   bash bench/run.sh build/bench/sparse_bench
#
# Extra arguments after the binary are passed to it (e.g. --benchmark_filter=Optimizer); the
# table then shows what ran.
set -euo pipefail

bin=${1:-build/bench/ps_bench}
shift || true
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out="$here/results.md"

if [[ ! -x $bin ]]; then
  echo "run.sh: no benchmark binary at $bin; build it first (make build)" >&2
  exit 1
fi

name=$(basename "$bin")
json=$(mktemp "${TMPDIR:-/tmp}/$name.XXXXXX.json")
trap 'rm -f "$json"' EXIT

echo "running $bin (5 repetitions, about 1-2 minutes)..." >&2
# Random interleaving runs the repetitions of all benchmarks in random order, so a burst of load
# from elsewhere on the machine is spread over benchmarks and their baselines instead of hitting
# one of them in every repetition.
"$bin" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
  --benchmark_enable_random_interleaving=true --benchmark_format=json "$@" >"$json"

revision=$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n $(git -C "$here" status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  revision="$revision (with uncommitted changes)"
fi

/usr/bin/python3 - "$json" "$out" "$revision" "$name" <<'PY'
import json
import os
import re
import sys

json_path, out_path, revision, bench_name = sys.argv[1:5]
with open(json_path) as f:
    report = json.load(f)

UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}


def short(name):
    return re.sub(r"/min_time:[0-9.]+", "", name).replace("/real_time", "")


# run name -> {"median": {...}, "cv": {...}} or {"error": message}
runs = {}
order = []
for b in report.get("benchmarks", []):
    name = short(b.get("run_name", b["name"]))
    if name not in runs:
        runs[name] = {}
        order.append(name)
    if b.get("error_occurred"):
        runs[name]["error"] = b.get("error_message", "error")
    elif b.get("run_type") == "aggregate":
        runs[name][b["aggregate_name"]] = b


def median_ns(name):
    r = runs.get(name, {}).get("median")
    return None if r is None else r["real_time"] * UNIT_NS[r.get("time_unit", "ns")]


def fmt_time(ns):
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def fmt_rate(x, unit=""):
    if x is None:
        return "-"
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}".rstrip()


def cv(name):
    r = runs.get(name, {}).get("cv")
    if r is None:
        return "-"
    return f"{100 * r['real_time']:.1f}%"


def field(name, key):
    r = runs.get(name, {}).get("median")
    return None if r is None else r.get(key)


def ratio(a, b):
    # Sparse runs use several threads: compare their throughput (time per key), not the time
    # of one thread's iteration. Lower is better either way.
    if a.startswith("BM_Sparse"):
        ia, ib = field(a, "items_per_second"), field(b, "items_per_second")
        return None if not ia or not ib else ib / ia
    ta, tb = median_ns(a), median_ns(b)
    return None if ta is None or tb is None or tb == 0 else ta / tb


def fmt_ratio(x):
    return "-" if x is None else f"{x:.2f}x"


OPT_BASE = "BM_StreamBaseline/1048576"
RPC_BASE = "BM_SerializeBaseline"
COMPUTE = "BM_MlpForwardBackward/64"


# Display order: each baseline, then what is compared with it (interleaving shuffles the JSON).
ORDER = [OPT_BASE] + [f"BM_Optimizer/{o}/1048576"
                      for o in ("sgd", "momentum", "adagrad", "adam", "rmsprop", "ftrl")] + [
    RPC_BASE, "BM_RpcStep/unsharded", "BM_RpcStep/kernel0_2shards", COMPUTE] + [
    f"{b}/{d}{t}" for d in (8, 16, 64)
    for b, t in (("BM_SparseMapBaseline", ""), ("BM_SparseLocal", ""),
                 ("BM_SparseRpc", "/threads:2"))]
order.sort(key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def baseline_of(name):
    if name.startswith("BM_Optimizer/"):
        return OPT_BASE
    if name.startswith("BM_RpcStep/"):
        return RPC_BASE
    if name.startswith(("BM_SparseLocal/", "BM_SparseRpc/")):
        return "BM_SparseMapBaseline/" + name.split("/")[1]
    return None


lines = []
ctx = report.get("context", {})
cpu_model = "unknown CPU"
try:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
except OSError:
    pass
caches = ", ".join(
    f"L{c['level']} {c['type'][:1].lower() if c['type'] != 'Unified' else ''}"
    f"{c['size'] // 1024} KiB" for c in ctx.get("caches", []))
lines.append(f"# {bench_name} results")
lines.append("")
lines.append(f"- date: {ctx.get('date', '?')}; revision: {revision}")
lines.append(f"- machine: {ctx.get('num_cpus', '?')} CPUs ({cpu_model}, "
             f"{ctx.get('mhz_per_cpu', '?')} MHz), caches {caches}; load average at start "
             f"{', '.join(f'{x:.2f}' for x in ctx.get('load_avg', []))}")
lines.append("- 5 repetitions, medians of wall time; CV = stddev / mean over the repetitions. "
             "A shared 2-core machine is noisy: read ratios, not absolute times, and treat "
             "differences under ~10% as noise.")
lines.append("- ratio = median time / median time of the baseline (lower is better; 1.00x is the "
             "baseline's speed).")
lines.append("")
lines.append("| benchmark | median time | items/s | bytes/s | CV | baseline | ratio |")
lines.append("|---|---:|---:|---:|---:|---|---:|")
for name in order:
    r = runs[name]
    if "median" not in r:
        lines.append(f"| {name} | ERROR: {r.get('error', 'no result')} | | | | | |")
        continue
    base = baseline_of(name)
    lines.append(
        f"| {name} | {fmt_time(median_ns(name))} | {fmt_rate(field(name, 'items_per_second'), '/s')} "
        f"| {fmt_rate(field(name, 'bytes_per_second'), 'B/s')} | {cv(name)} | "
        f"{base or '(baseline)' if name != COMPUTE else '(reference)'} | "
        f"{fmt_ratio(ratio(name, base)) if base else '-'} |")

lines.append("")
if bench_name == "sparse_bench":
    lines.append("Items: keys looked up and pushed (one lookup and one Adagrad update of a row "
                 "each). Ratio: baseline keys/s / keys/s, i.e. time per key against the bare map "
                 "(the RPC runs use 2 worker threads, so their ratio is of throughputs).")
    lines.append("")
    lines.append("## Memory per row (Adagrad: payload = row + one slot)")
    lines.append("")
    lines.append("| benchmark | rows | bytes/row | payload bytes/row | bytes / payload |")
    lines.append("|---|---:|---:|---:|---:|")
    for name in order:
        b, p = field(name, "bytes_per_row"), field(name, "payload_bytes_per_row")
        if b is None or not p:
            continue
        rows = field(name, "rows")
        lines.append(f"| {name} | {'-' if rows is None else f'{rows:.0f}'} | {b:.1f} | {p:.0f} | "
                     f"{b / p:.2f}x |")
else:
    lines.append("Items: floats updated (optimizer, stream), steps (RPC, serialize, MLP). Bytes: "
                 "the least memory traffic of the update (optimizer, stream), or the tensor "
                 "bytes pulled plus pushed in one step (RPC, serialize).")
if COMPUTE in runs:
    lines.append("")
    lines.append("## One step: communication vs compute")
    lines.append("")
    lines.append("| communication | comm time | compute (fwd+bwd, batch 64) | comm / compute | "
                 "comm share of step |")
    lines.append("|---|---:|---:|---:|---:|")
    for name in order:
        if not name.startswith("BM_RpcStep/") and name != RPC_BASE:
            continue
        r = ratio(name, COMPUTE)
        share = None if r is None else r / (1 + r)
        lines.append(f"| {name} | {fmt_time(median_ns(name))} | {fmt_time(median_ns(COMPUTE))} | "
                     f"{fmt_ratio(r)} | {'-' if share is None else f'{100 * share:.0f}%'} |")
    lines.append("")
    lines.append("Comm share = comm / (comm + compute): the fraction of a sequential pull, "
                 "compute, push step spent communicating. The serialize baseline row is the share "
                 "if the network cost nothing beyond the proto copies.")

text = "\n".join(lines) + "\n"
print(text, end="")
# results.md holds one section per binary, each starting "# <binary> results": replace this
# binary's, keep the others.
sections, current = {}, None
if os.path.exists(out_path):
    with open(out_path) as f:
        for line in f:
            m = re.match(r"# (\S+) results$", line.rstrip("\n"))
            if m:
                current = m.group(1)
                sections[current] = ""
            if current is not None:
                sections[current] += line
sections[bench_name] = text
with open(out_path, "w") as f:
    f.write("\n".join(s.rstrip("\n") + "\n" for s in sections.values()))
print(f"(written to {out_path})", file=sys.stderr)
PY
