#!/usr/bin/env bash
# What TLS costs on a network link rather than on loopback: runs bench/tls_bench in a network
# namespace of its own whose loopback (MTU 9000, as a jumbo-frame link) is shaped by a token
# bucket (tc's tbf) to RATE, so that plaintext, the token and TLS + token all move their bytes at
# a link's speed while the encryption still runs on this machine's CPU. Needs root (ip netns,
# tc). The bucket holds 64 KB, so a 1 MB transfer is paced at RATE rather than sent in a burst.
#
#   bash bench/tls_link.sh [path/to/tls_bench] [RATE] [repetitions]
#   defaults: build/bench/tls_bench 10gbit 15
set -euo pipefail
BIN=${1:-build/bench/tls_bench}
RATE=${2:-10gbit}
REPS=${3:-15}
if [ ! -x "$BIN" ]; then
  echo "tls_link.sh: $BIN is not a built tls_bench (cmake --build build --target tls_bench)" >&2
  exit 2
fi
ns="pstrain-tls-link-$$"
ip netns add "$ns"
trap 'ip netns del "$ns"' EXIT
ip -n "$ns" link set lo mtu 9000 up
ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$RATE" burst 64kb latency 50ms
echo "loopback of a network namespace, MTU 9000, shaped by tbf to $RATE"
ip netns exec "$ns" "$BIN" "$REPS"
