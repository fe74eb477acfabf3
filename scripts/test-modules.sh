#!/usr/bin/env bash
# Runs `go test` in each module given, TEST_JOBS jobs at a time: each
# module's tests, and then its benchmarks once each (-benchtime 1x) so
# that none rots. It prints each job's output whole when it ends (so
# concurrent jobs do not interleave), then a line per job with its wall
# time, and exits 1 when any job failed.
#
# Most tests wait on real time (windows passing, failovers, outages) and
# leave the CPUs idle, so jobs run side by side: the suite's wall time is
# then about its CPU time over the cores rather than the sum of the
# modules'. Benchmarks are a job of their own: with -bench, go test runs a
# module's packages one at a time.
#
# Environment: GO (go), TEST_JOBS (3), TEST_P (4, go test's -p: packages
# of one module at once), TEST_PARALLEL (8, go test's -parallel),
# TEST_FLAGS (extra go test flags, e.g. -short).
set -uo pipefail

GO=${GO:-go}
jobs=${TEST_JOBS:-3}
parallel=${TEST_PARALLEL:-8}
packages=${TEST_P:-4}
flags=${TEST_FLAGS:-}
root=$(pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

run() {
	local m=$1 what=$2 name
	name=$(echo "$m $what" | tr '/ ' '__')
	local start=$SECONDS rc=0 args
	case $what in
	tests) args=(-p "$packages" -parallel "$parallel") ;;
	benchmarks) args=(-run '^$' -bench . -benchtime 1x) ;;
	esac
	# shellcheck disable=SC2086 # TEST_FLAGS holds several flags
	(cd "$root/$m" && $GO test -race -count=1 -timeout 10m "${args[@]}" $flags ./...) >"$out/$name.log" 2>&1 || rc=$?
	local took=$((SECONDS - start))
	{
		flock 9
		echo "== go test $m: $what (${took}s, exit $rc)"
		# Benchmark lines say nothing at one iteration: keep failures only.
		grep -v -E '^(Benchmark|goos:|goarch:|cpu:|pkg:|PASS$)' "$out/$name.log"
		printf '  %-28s %-10s %5ss  exit %s\n' "$m" "$what" "$took" "$rc" >>"$out/summary"
	} 9>"$out/lock"
	return "$rc"
}

start=$SECONDS
pids=()
for what in tests benchmarks; do
	for m in "$@"; do
		while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
			wait -n
		done
		run "$m" "$what" &
		pids+=($!)
	done
done
failed=0
for p in "${pids[@]}"; do
	wait "$p" || failed=1
done
echo "== go test ($((SECONDS - start))s in all, $jobs jobs at a time)"
cat "$out/summary"
exit "$failed"
