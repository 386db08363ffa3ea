#!/usr/bin/env bash
# Compares pgbench -S through floodgate's PostgreSQL proxy, pgbouncer (session
# mode), a plain TCP relay (io.Copy) and directly, in one run on loopback, in
# the prepared, simple and extended query modes, and prints the median tps of
# each and the ratios. The benchmark itself is BenchmarkPgbench in
# ../pgproxy (it starts PostgreSQL and pgbouncer through testkit).
#
#   ./pgbench.sh                       # 3 rounds of 20 s runs (about 12 minutes)
#   PGBENCH_T=10 PGBENCH_ROUNDS=5 ./pgbench.sh
#
# Environment: PGBENCH_T (seconds per run), PGBENCH_ROUNDS, PGBENCH_MODES,
# PGBENCH_CLIENTS (8), PGBENCH_JOBS (2); PROFILE=file writes a CPU profile
# of the proxy's process. The output is also kept in results/pgbench.txt.
# Needs the Debian packages postgresql and pgbouncer.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p results
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
args=(-run '^$' -bench '^BenchmarkPgbench$' -benchtime 1x -timeout 120m -o "$tmp/pgproxy.test")
if [[ -n ${PROFILE:-} ]]; then
	args+=(-cpuprofile "$PROFILE")
fi
{
	echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
	(cd .. && go test "${args[@]}" ./pgproxy/)
} 2>&1 | tee results/pgbench.txt
