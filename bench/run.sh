#!/usr/bin/env bash
# Runs the side-by-side benchmarks, keeps the raw output under results/, and
# writes benchstat tables and RESULTS.md.
#
#   ./run.sh                  # every family whose floodgate package exists
#   ./run.sh memory http      # some families
#
# Environment:
#   ROUNDS=6        rounds per family (benchstat wants 6 or more samples)
#   BENCHTIME=1s    -test.benchtime of each benchmark
#   QUIET_LOAD=1.5  wait (at most QUIET_WAIT seconds, default 300) until the
#                   1-minute load average is below this before each family;
#                   0 disables the wait
#
# Each family is one test binary. Each round runs it once, with every
# implementation of every workload in turn (-test.count=1), and the rounds are
# appended to one file: a burst of noise from another process then lands on
# one sample of several implementations, not on all samples of one, so the
# ratios stay fair on a small shared machine. benchstat reads the rounds as
# samples of the same benchmark.
set -euo pipefail

cd "$(dirname "$0")"
# bench is a module of its own, built as a user's build would, not with the
# repository's go.work.
export GOWORK=off
ROUNDS=${ROUNDS:-6}
BENCHTIME=${BENCHTIME:-1s}
QUIET_LOAD=${QUIET_LOAD:-1.5}
QUIET_WAIT=${QUIET_WAIT:-300}
BENCHSTAT_VERSION=v0.0.0-20260908200009-22c9c6c9d4da

if [[ -x "$HOME/go/bin/benchstat" ]]; then
	benchstat() { "$HOME/go/bin/benchstat" "$@"; }
elif command -v benchstat >/dev/null; then
	benchstat() { command benchstat "$@"; }
else
	benchstat() { go run "golang.org/x/perf/cmd/benchstat@$BENCHSTAT_VERSION" "$@"; }
fi

families=("$@")
if [[ ${#families[@]} -eq 0 ]]; then
	families=(memory)
	[[ -d ../redisstore ]] && families+=(redis)
	[[ -d ../httplimit ]] && families+=(http)
fi

declare -A bench=([memory]=BenchmarkMemory [redis]=BenchmarkRedis [redishot]=BenchmarkRedisHotKey [http]=BenchmarkHTTP [wait]=BenchmarkWait)
# benchstat's first column is the base the others are compared with:
# floodgate in every family.
declare -A cols=([memory]=/impl [redis]=/impl [redishot]=/impl [wait]=/impl [http]='/impl@(floodgate bare httprate httprate-chi ulule)')

mkdir -p results
bin=$(mktemp -d)/bench.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" .

load() { cut -d' ' -f1 /proc/loadavg; }

wait_quiet() {
	[[ $QUIET_LOAD == 0 ]] && return
	local waited=0
	while awk -v l="$(load)" -v q="$QUIET_LOAD" 'BEGIN { exit !(l >= q) }'; do
		if ((waited >= QUIET_WAIT)); then
			echo "run.sh: load $(load) still >= $QUIET_LOAD after ${QUIET_WAIT}s; running anyway" >&2
			return
		fi
		sleep 10
		waited=$((waited + 10))
	done
}

{
	echo "command: bench/run.sh ${families[*]} (ROUNDS=$ROUNDS BENCHTIME=$BENCHTIME)"
	echo "round: go test -c -o bench.test . && ./bench.test -test.run '^\$' -test.bench '^<Family>\$' -test.benchtime $BENCHTIME -test.benchmem -test.count 1"
	echo "tables: benchstat -col /impl results/<family>.txt (http: -col '/impl@(floodgate bare httprate httprate-chi ulule)')"
	echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
	echo "nproc: $(nproc)"
	echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
	echo "go: $(go version)"
	echo "floodgate: $(git -C .. rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C .. status --porcelain -- . ':!bench' 2>/dev/null | grep -q . && echo ' (with uncommitted changes)' || true)"
	if command -v redis-server >/dev/null; then echo "redis: $(redis-server --version)"; fi
	echo "rounds: $ROUNDS"
	echo "benchtime: $BENCHTIME"
} >results/machine.txt

for f in "${families[@]}"; do
	name=${bench[$f]:?unknown family $f (use memory, redis, redishot, http or wait)}
	out=results/$f.txt
	: >"$out"
	wait_quiet
	echo "family: $f; load before: $(load)" | tee -a results/machine.txt
	for ((r = 1; r <= ROUNDS; r++)); do
		echo "run.sh: $f round $r/$ROUNDS" >&2
		"$bin" -test.run '^$' -test.bench "^$name\$" -test.benchtime "$BENCHTIME" \
			-test.benchmem -test.count 1 -test.timeout 30m | tee -a "$out" | grep -E '^Benchmark' >&2
	done
	echo "family: $f; load after: $(load)" >>results/machine.txt
	benchstat -col "${cols[$f]}" "$out" >"results/$f.benchstat.txt"
done

go run ./internal/report -dir results >RESULTS.md
echo "run.sh: wrote RESULTS.md" >&2
