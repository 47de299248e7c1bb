#!/usr/bin/env bash
# `make fuzz`: runs every fuzz target built in BUILD_DIR/fuzz for SECONDS seconds each, one after
# the other, from a copy of its seed corpus (fuzz/corpus/<target>; the corpus grown by the run
# stays in BUILD_DIR/fuzz-corpus/<target>, the repository's seeds are not touched). Exits
# non-zero if any target crashes, leaks, times out, runs out of memory or trips a sanitizer;
# the input that did it is saved as BUILD_DIR/fuzz-artifacts/<target>-crash-<sha1> (and so on),
# and `BUILD_DIR/fuzz/<target> FILE` reruns it. Prints per target the runs and the final
# coverage (cov: edges, ft: features) from libFuzzer's final stats.
#   run.sh BUILD_DIR [SECONDS] [TARGET...]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:?usage: $0 BUILD_DIR [SECONDS] [TARGET...]}
SECONDS_EACH=${2:-600}
shift $(( $# < 2 ? $# : 2 ))
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for f in fuzz/*_fuzz.cc; do targets+=("$(basename "$f" .cc)"); done
fi

mkdir -p "$BUILD/fuzz-artifacts" "$BUILD/fuzz-logs"
# The targets' temporary files (fuzz_util.h TempDir), removed even after a crash.
export TMPDIR=$(mktemp -d "${TMPDIR:-/tmp}/pstrain-fuzz-run-XXXXXX")
trap 'rm -rf "$TMPDIR"' EXIT
# UBSan reports are fatal in the build (-fno-sanitize-recover); print their stacks.
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
summary=()
failed=0
for t in "${targets[@]}"; do
  bin=$BUILD/fuzz/$t
  if [ ! -x "$bin" ]; then
    echo "fuzz: $t is not built ($bin)" >&2
    failed=1
    summary+=("$t: NOT BUILT")
    continue
  fi
  corpus=$BUILD/fuzz-corpus/$t
  mkdir -p "$corpus"
  [ -d "fuzz/corpus/$t" ] && cp -n fuzz/corpus/"$t"/* "$corpus"/ 2>/dev/null
  log=$BUILD/fuzz-logs/$t.log
  echo "fuzz: $t for ${SECONDS_EACH}s (log $log)"
  # -timeout: one input taking 25 s is a hang; -rss_limit_mb: an input making the reader
  # allocate past 2 GB is a finding too; -detect_leaks is on by default under ASan.
  "$bin" -max_total_time="$SECONDS_EACH" ${FUZZ_SEED:+-seed=$FUZZ_SEED} -timeout=25 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$BUILD/fuzz-artifacts/$t-" "$corpus" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
  line="$t: ${runs:-?} runs, cov ${cov:-?}, ft ${ft:-?}, corpus ${corp:-?}"
  if [ $rc -ne 0 ]; then
    failed=1
    line+=" FAILED (exit $rc)"
    grep -E 'ERROR: |runtime error|FUZZ_CHECK|SUMMARY|Test unit written' "$log" | head -8 >&2
  fi
  echo "  $line"
  summary+=("$line")
done
echo "fuzz: summary (${SECONDS_EACH}s each)"
printf '  %s\n' "${summary[@]}"
exit $failed
