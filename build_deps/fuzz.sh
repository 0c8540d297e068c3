#!/usr/bin/env bash
# Fuzzes every decoder of received bytes (the payload container, the
# permutation, the index codecs, the Bloom query, the value codecs) with
# libFuzzer: builds kernels/fuzz/decoders_fuzzer.cpp with clang-14 and
# ASan/UBSan from the TF-free kernel headers, then runs it over the seed and
# regression corpus tests/fuzz_corpus/<target>/ for a time budget shared by
# the targets. Fails (exit 1) on any finding: a crash or sanitizer report, a
# hang (> 2 s for one input), an allocation above 64 MiB (the harness itself
# asserts tighter bounds: outputs <= the receiver's n / max_values, or <= 8
# per payload byte, before allocating), or a silent accept (see the
# harness's header comment). Prints one line per target: executions,
# inputs/s, corpus size, coverage.
#
# Usage: build_deps/fuzz.sh [--install] [--budget SECONDS] [--jobs N] [--targets a,b,...]
#   --install   apt-get install clang-14 and libfuzzer-14-dev if missing (CI)
#   --budget    total fuzzing seconds over all targets (default 180, env
#               DR_FUZZ_BUDGET): each target fuzzes budget/targets seconds
#   --jobs      targets fuzzed at once, one core each (default: the number
#               of cores): the same fuzzing per target, budget/jobs wall time
#   --targets   only these targets (names as in tests/fuzz_corpus/: the
#               non-codec targets and every codec with kernels in the codec
#               table, deepreduce_tf/ops/codec_table.py)
# Env: DR_FUZZ_DIR: work directory (default: a new temporary one). Nothing is
# written into the source tree: the corpus is fuzzed in a scratch copy, and
# findings go to $DR_FUZZ_DIR/findings/.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
install=0
budget="${DR_FUZZ_BUDGET:-180}"
only=""
jobs="$(nproc 2>/dev/null || echo 1)"
while [ $# -gt 0 ]; do
  case "$1" in
    --install) install=1 ;;
    --budget) budget="${2:?--budget needs SECONDS}"; shift ;;
    --budget=*) budget="${1#--budget=}" ;;
    --jobs) jobs="${2:?--jobs needs N}"; shift ;;
    --jobs=*) jobs="${1#--jobs=}" ;;
    --targets) only="${2:?--targets needs a list}"; shift ;;
    --targets=*) only="${1#--targets=}" ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fuzz.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$budget" in ''|*[!0-9]*) echo "fuzz.sh: --budget must be whole seconds, got '$budget'" >&2; exit 2 ;; esac
case "$jobs" in ''|0|*[!0-9]*) echo "fuzz.sh: --jobs must be a whole number >= 1, got '$jobs'" >&2; exit 2 ;; esac

cxx=clang++-14
have_tools() {
  command -v "$cxx" >/dev/null && ls /usr/lib/llvm-14/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a \
    >/dev/null 2>&1 && [ -e /usr/include/zlib.h ]
}
if ! have_tools; then
  if [ "$install" = 1 ]; then
    pkgs=(clang-14 libclang-rt-14-dev libfuzzer-14-dev zlib1g-dev)
    apt-get install -y -q "${pkgs[@]}" >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${pkgs[@]}" >/dev/null; }
  else
    echo "fuzz.sh: needs clang-14, libfuzzer-14-dev and zlib1g-dev (apt-get install" \
         "clang-14 libfuzzer-14-dev zlib1g-dev), or run with --install" >&2
    exit 2
  fi
fi

work="${DR_FUZZ_DIR:-$(mktemp -d /tmp/deepreduce_fuzz.XXXXXX)}"
mkdir -p "$work/findings" "$work/corpus"
bin="$work/decoders_fuzzer"
echo "fuzz.sh: building $bin"
"$cxx" -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root" "$root/kernels/fuzz/decoders_fuzzer.cpp" -lz -o "$bin"
# The harness's targets, in the order of its enum Target (byte 0 of an input):
# the binary lists them, from the codec table it was compiled with.
mapfile -t targets < <(DR_FUZZ_LIST=1 "$bin")
[ "${#targets[@]}" -gt 0 ] || { echo "fuzz.sh: $bin listed no targets" >&2; exit 1; }

# Bounds: 64 MiB for one allocation, 2 GiB resident, 2 s per input.
flags=(-timeout=2 -malloc_limit_mb=64 -rss_limit_mb=2048 -max_len=16384
       -use_value_profile=1 -print_final_stats=1)
export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

selected=()
for i in "${!targets[@]}"; do
  t="${targets[$i]}"
  if [ -z "$only" ] || [[ ",$only," == *",$t,"* ]]; then selected+=("$i"); fi
done
[ "${#selected[@]}" -gt 0 ] || { echo "fuzz.sh: no target matches '$only' (${targets[*]})" >&2; exit 2; }
per=$(( budget / ${#selected[@]} ))
[ "$per" -ge 1 ] || per=1
echo "fuzz.sh: ${#selected[@]} targets, ${per} s each, $jobs at a time; work directory $work"

fuzz_one() {  # one target; its exit status goes to $work/<target>.rc
  local i="$1" t="${targets[$1]}" rc=0
  local scratch="$work/corpus/$t"
  rm -rf "$scratch"
  mkdir -p "$scratch"
  cp "$root/tests/fuzz_corpus/$t/"*.bin "$scratch/"
  DR_FUZZ_TARGET="$i" "$bin" "${flags[@]}" -max_total_time="$per" \
    -artifact_prefix="$work/findings/$t-" "$scratch" >"$work/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$work/$t.rc"
}
running=0
for i in "${selected[@]}"; do
  if [ "$running" -ge "$jobs" ]; then wait -n || true; running=$((running - 1)); fi
  fuzz_one "$i" &
  running=$((running + 1))
done
wait

failed=0
total_runs=0
printf '%-15s %12s %10s %8s %8s %s\n' target executions inputs/s corpus cov result
for i in "${selected[@]}"; do
  t="${targets[$i]}"
  log="$work/$t.log"
  rc=$(cat "$work/$t.rc" 2>/dev/null || echo "?")
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
  cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
  corp=$(echo "$last" | sed -n 's/.*corp: \([0-9]*\).*/\1/p')
  result=ok
  if [ "$rc" != 0 ]; then
    result="FINDING (exit $rc; log $log)"
    failed=1
  fi
  total_runs=$(( total_runs + ${runs:-0} ))
  printf '%-15s %12s %10s %8s %8s %s\n' "$t" "${runs:-?}" "${rate:-?}" "${corp:-?}" \
    "${cov:-?}" "$result"
done
echo "fuzz.sh: $total_runs executions in all"
if [ "$failed" = 1 ]; then
  echo "fuzz.sh: FINDINGS (inputs in $work/findings/):"
  ls -l "$work/findings/"
  for f in "$work/findings/"*; do
    [ -e "$f" ] || continue
    echo "  reproduce: DR_FUZZ_VERBOSE=1 $bin $f"
  done
  echo "  (rebuild the binary with this script; add a fixed input to" \
       "tests/fuzz_corpus/<target>/regress_<name>.bin)"
  exit 1
fi
echo "fuzz.sh: no findings"
