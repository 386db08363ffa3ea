#!/usr/bin/env bash
# Runs the concurrency benchmarks and keeps their output under results/:
#
#   BenchmarkThrottle   overhead of throttle.Limit beside chi's Throttle
#                       (admitted, backlog, refused), ROUNDS rounds, benchstat
#                       table in results/throttle.benchstat.txt
#   BenchmarkShedding   a reverse proxy offered 4x its upstream's capacity,
#                       protected by each limiter and by none, SHED_ROUNDS
#                       runs of about 35 s each, in results/shedding.txt
#
#   ./concurrency.sh
#
# Environment: ROUNDS=6, BENCHTIME=1s, SHED_ROUNDS=3, QUIET_LOAD=2 and
# QUIET_WAIT=120 (wait for a quiet machine before the shedding runs);
# SKIP_THROTTLE=1 runs the shedding runs only.
set -euo pipefail

cd "$(dirname "$0")"
export GOWORK=off
ROUNDS=${ROUNDS:-6}
BENCHTIME=${BENCHTIME:-1s}
SHED_ROUNDS=${SHED_ROUNDS:-3}
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da

if [[ -x "$HOME/go/bin/benchstat" ]]; then
	benchstat() { "$HOME/go/bin/benchstat" "$@"; }
elif command -v benchstat >/dev/null; then
	benchstat() { command benchstat "$@"; }
else
	benchstat() { go run "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" "$@"; }
fi

QUIET_LOAD=${QUIET_LOAD:-2}
QUIET_WAIT=${QUIET_WAIT:-120}

# wait_quiet waits (at most QUIET_WAIT seconds) until the 1-minute load
# average is below QUIET_LOAD; 0 disables the wait. The shedding runs
# measure latency, which a machine busy with other work inflates.
wait_quiet() {
	[[ $QUIET_LOAD == 0 ]] && return
	local waited=0
	while awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v q="$QUIET_LOAD" 'BEGIN { exit !(l >= q) }'; do
		if ((waited >= QUIET_WAIT)); then
			echo "concurrency.sh: load still >= $QUIET_LOAD after ${QUIET_WAIT}s; running anyway" >&2
			return
		fi
		sleep 10
		waited=$((waited + 10))
	done
}

mkdir -p results
bin=$(mktemp -d)/bench.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" .

{
	echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "nproc: $(nproc)"
	echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "go: $(go version)"
	echo "floodgate: $(git -C .. rev-parse --short HEAD 2>/dev/null || echo unknown)"
} >results/concurrency-machine.txt

if [[ ${SKIP_THROTTLE:-} != 1 ]]; then
: >results/throttle.txt
for ((r = 1; r <= ROUNDS; r++)); do
	echo "concurrency.sh: throttle round $r/$ROUNDS" >&2
	"$bin" -test.run '^$' -test.bench '^BenchmarkThrottle$' -test.benchtime "$BENCHTIME" \
		-test.benchmem -test.count 1 -test.timeout 10m | tee -a results/throttle.txt | grep -E '^Benchmark' >&2
done
benchstat -col /impl results/throttle.txt >results/throttle.benchstat.txt
fi

wait_quiet
echo "load before shedding: $(cut -d' ' -f1-3 /proc/loadavg)" >>results/concurrency-machine.txt
# Each run is bounded in time by the benchmark itself (about 5 s per
# protection), whatever the machine does.
: >results/shedding.txt
# One round after another, every protection in each, so that a burst of
# load from elsewhere lands on one sample of several protections.
for ((r = 1; r <= SHED_ROUNDS; r++)); do
	echo "concurrency.sh: shedding round $r/$SHED_ROUNDS" >&2
	"$bin" -test.run '^$' -test.bench '^BenchmarkShedding$' -test.benchtime 1x \
		-test.count 1 -test.timeout 10m -test.v | tee -a results/shedding.txt | grep -E '^Benchmark|shedding_test' >&2
done
benchstat -col /impl results/shedding.txt >results/shedding.benchstat.txt
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>results/concurrency-machine.txt
echo "concurrency.sh: wrote results/throttle.benchstat.txt and results/shedding.benchstat.txt" >&2
