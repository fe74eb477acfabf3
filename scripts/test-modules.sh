#!/usr/bin/env bash
# Runs `go test` in each module given, TEST_JOBS modules at a time, and
# prints each module's output whole when it ends (so concurrent modules do
# not interleave), then a line per module with its wall time. Exits 1 when
# any module failed.
#
# Most tests wait on real time (windows passing, failovers, outages) and
# leave the CPUs idle, so modules run side by side: the suite's wall time
# is then about its CPU time over the cores rather than the sum of the
# modules'. Each module runs with the race detector, and runs every
# benchmark once (-benchtime 1x) so that none rots.
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
	local m=$1 name=${1//\//_}
	local start=$SECONDS rc=0
	# shellcheck disable=SC2086 # TEST_FLAGS holds several flags
	(cd "$root/$m" && $GO test -race -count=1 -p "$packages" -parallel "$parallel" -timeout 10m \
		-bench . -benchtime 1x $flags ./...) >"$out/$name.log" 2>&1 || rc=$?
	local took=$((SECONDS - start))
	{
		flock 9
		echo "== go test $m (${took}s, exit $rc)"
		# Benchmark lines say nothing at one iteration: keep failures only.
		grep -v -E '^(Benchmark|goos:|goarch:|cpu:|pkg:|PASS$)' "$out/$name.log"
		printf '  %-28s %5ss  exit %s\n' "$m" "$took" "$rc" >>"$out/summary"
	} 9>"$out/lock"
	return "$rc"
}

start=$SECONDS
pids=()
for m in "$@"; do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	run "$m" &
	pids+=($!)
done
failed=0
for p in "${pids[@]}"; do
	wait "$p" || failed=1
done
echo "== modules ($((SECONDS - start))s in all, $jobs at a time)"
cat "$out/summary"
exit "$failed"
