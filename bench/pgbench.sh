#!/usr/bin/env bash
# One command for the PostgreSQL proxy's end-to-end numbers: pgbench -S
# directly and through floodgate's proxy (plain and with clients over TLS), pgbouncer in session and in
# transaction mode, floodgate in front of pgbouncer in transaction mode, a
# Go io.Copy relay and a Go epoll relay (the floor of a Go hop), in the
# simple and prepared query modes at 8 and 32 clients, interleaved round by
# round with the order reversed every other round. It prints every run
# (tps, each hop's CPU per transaction from getrusage and /proc, the load
# average), then medians with their ranges and the floodgate / pgbouncer
# ratios per round. The benchmark itself is BenchmarkPgbench in ../pgproxy;
# it starts PostgreSQL and both pgbouncers through testkit. Then
# BenchmarkPgbenchIdle, the many-clients row: 500 mostly idle clients
# (pgbench -R) through pgbouncer in transaction mode and through floodgate
# in front of it, and each hop's resident memory per client connection.
#
#   ./pgbench.sh                               # 4 rounds of 15 s runs (about 25 minutes)
#   PGBENCH_T=10 PGBENCH_ROUNDS=2 ./pgbench.sh
#   PGBENCH_TARGETS="floodgate pgbouncer" PGBENCH_CLIENTS=8 ./pgbench.sh
#   PROFILE=cpu.out PGBENCH_TARGETS=floodgate ./pgbench.sh   # a CPU profile of the proxy alone
#
# Environment: PGBENCH_T (seconds per run), PGBENCH_ROUNDS, PGBENCH_MODES
# ("simple prepared"), PGBENCH_CLIENTS ("8 32"), PGBENCH_JOBS (2),
# PGBENCH_TARGETS; PGBENCH_IDLE_CLIENTS (500) and PGBENCH_IDLE_RATE (500
# transactions a second, all clients) for the idle row; PROFILE=file writes a CPU profile of the test process
# (floodgate and the Go relays), with the test binary beside it as
# file.test for go tool pprof. The output is also kept in
# results/pgbench.txt. Needs the Debian packages postgresql and pgbouncer.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bin="$tmp/pgproxy.test"
args=(-run '^$' -bench '^BenchmarkPgbench(Idle)?$' -benchtime 1x -timeout 180m)
if [[ -n ${PROFILE:-} ]]; then
	bin="$PROFILE.test"
	args+=(-cpuprofile "$PROFILE")
fi
args+=(-o "$bin")
{
	echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
	(cd .. && go test "${args[@]}" ./pgproxy/)
} 2>&1 | grep --line-buffered -v '^time=' | tee results/pgbench.txt
