#!/usr/bin/env bash
# Runs the concurrency benchmarks and keeps their output under results/:
#
#   BenchmarkThrottle   overhead of httplimit.Throttle beside chi's Throttle
#                       (admitted, backlog, refused), ROUNDS rounds, benchstat
#                       table in results/throttle.benchstat.txt
#   BenchmarkShedding   a reverse proxy offered 4x its upstream's capacity,
#                       protected by each limiter and by none, SHED_ROUNDS
#                       runs of about 30 s each, in results/shedding.txt
#
#   ./concurrency.sh
#
# Environment: ROUNDS=6, BENCHTIME=1s, SHED_ROUNDS=3.
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

: >results/throttle.txt
for ((r = 1; r <= ROUNDS; r++)); do
	echo "concurrency.sh: throttle round $r/$ROUNDS" >&2
	"$bin" -test.run '^$' -test.bench '^BenchmarkThrottle$' -test.benchtime "$BENCHTIME" \
		-test.benchmem -test.count 1 -test.timeout 10m | tee -a results/throttle.txt | grep -E '^Benchmark' >&2
done
benchstat -col /impl results/throttle.txt >results/throttle.benchstat.txt

# Each run is bounded in time by the benchmark itself (about 5 s per
# protection), whatever the machine does.
"$bin" -test.run '^$' -test.bench '^BenchmarkShedding$' -test.benchtime 1x \
	-test.count "$SHED_ROUNDS" -test.timeout 10m -test.v | tee results/shedding.txt | grep -E '^Benchmark|shedding_test' >&2
benchstat -col /impl results/shedding.txt >results/shedding.benchstat.txt
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >>results/concurrency-machine.txt
echo "concurrency.sh: wrote results/throttle.benchstat.txt and results/shedding.benchstat.txt" >&2
