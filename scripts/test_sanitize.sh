#!/usr/bin/env bash
# `make test-sanitize`: builds the unit tests, a few cluster tests and the pstrain binary in a
# build directory configured with -DPSTRAIN_SANITIZE=address,undefined, then runs them with
# options that turn every AddressSanitizer, LeakSanitizer or UndefinedBehaviorSanitizer report
# into a failed test.
#   test_sanitize.sh BUILD_DIR [JOBS]
# The unit tests (label unit; tests/CMakeLists.txt's sanitize_tests target builds them) and the
# cluster tests, chosen to put each role in a real process under the sanitizers:
#   cluster_test       one whole MNIST job through `pstrain launch` (chief, 2 PS, 2 workers) and
#                      one from TF_CONFIG: the training path end to end
#   badinput_test      every refusal of bad flags, TF_CONFIG, data and ports: the error paths
#   py_grpc_probe_test oversized, forged and 300 random requests to every method of the
#                      three services: the parsers a peer reaches (the Python client is not
#                      instrumented; only the pstrain servers it probes are)
# The other Python tests load the pybind11 extension, which under ASan needs libasan preloaded
# into Python: they are left to `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: $0 BUILD_DIR [JOBS]}
JOBS=${2:-$(nproc)}
CLUSTER_CTEST='^(ClusterTest\.|BadInputTest\.|py_grpc_probe_test$)'

# One target (tests/CMakeLists.txt): make builds the test executables two at a time, where
# naming each as a target of its own would build them one after the other.
cmake --build "$BUILD" -j"$JOBS" --target sanitize_tests

supp=$(pwd)/scripts/lsan_suppressions.txt
# halt_on_error: the first report ends the process with exit code 1, so the test fails.
# detect_leaks: LeakSanitizer runs at every exit; third-party leaks by design are suppressed.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:detect_stack_use_after_return=0:strict_string_checks=1:check_initialization_order=1
export LSAN_OPTIONS=suppressions=$supp:print_suppressions=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
start=$(date +%s)
cd "$BUILD"
status=0
# The peak-memory test is left out: AddressSanitizer's quarantine keeps freed memory resident,
# so the process's peak says nothing of pstrain's copies.
ctest -L unit -E 'PeakMemory' --output-on-failure -j"$JOBS" --timeout 900 || status=1
ctest -R "$CLUSTER_CTEST" --output-on-failure -j"$JOBS" --timeout 900 || status=1
echo "test-sanitize: $(( $(date +%s) - start )) s of tests, $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
