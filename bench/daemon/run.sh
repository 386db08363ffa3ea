#!/usr/bin/env bash
# Measures the daemon's front ends on loopback and prints the numbers that
# docs/BENCHMARKS.md reports:
#
#   (a) the reverse proxy with limiting on and off, and nginx limit_req, all
#       in front of the same upstream, loaded by wrk in interleaved rounds;
#   (b) ShouldRateLimit and (c) POST /v1/check over the Redis engine, 32
#       callers over 4 connections, one hot key and 64k keys, next to the
#       same limiter called directly.
#
#   ./run.sh            # everything
#   ./run.sh proxy      # (a) only
#   ./run.sh decisions  # (b) and (c) only
#   ./run.sh proxyvs    # (e): floodgate serve's proxy against nginx limit_req,
#                       #     allowed and denied, with a bare httputil.ReverseProxy
#                       #     and a bare net/http server as floors (proxyvs.go);
#                       #     requests/s and CPU per request of every target
#   ./run.sh rls        # (d): floodgate serve's Envoy listener against
#                       #     envoyproxy/ratelimit built from source (rls.go)
#   ./run.sh rlslease   # (d) with envoy.lease: auto, parity counting: hot
#                       #     keys, and 10k keys with and without leases
#
# Environment: ROUNDS (default 5), WRK_D (wrk duration, default 5s), WRK_C
# (connections, default 64), LOAD_D (load generator duration, default 5s),
# BASELINE (proxyvs: an older floodgate binary to run beside this tree's).
# Everything listens on 127.0.0.1 and stops by itself.
set -euo pipefail
cd "$(dirname "$0")"
# This module is not in the repository's go.work: it builds on its own go.mod.
export GOWORK=off
ROUNDS=${ROUNDS:-5}
WRK_D=${WRK_D:-5s}
WRK_C=${WRK_C:-64}
LOAD_D=${LOAD_D:-5s}
parts=("$@")
[[ ${#parts[@]} -eq 0 ]] && parts=(proxy proxyvs decisions rls)

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	[[ -f $tmp/nginx.pid ]] && kill "$(cat "$tmp/nginx.pid")" 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/daemonbench" .
bin=$tmp/daemonbench

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

wait_port() {
	for _ in $(seq 100); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "nothing listens on $1" >&2
	return 1
}

echo "# machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $(go version)"

if [[ " ${parts[*]} " == *" proxy "* ]]; then
	up=$(free_port); on=$(free_port); off=$(free_port); ngx=$(free_port)
	"$bin" upstream -listen "127.0.0.1:$up" & pids+=($!)
	"$bin" proxy -listen "127.0.0.1:$on" -upstream "http://127.0.0.1:$up" -limit=true & pids+=($!)
	"$bin" proxy -listen "127.0.0.1:$off" -upstream "http://127.0.0.1:$up" -limit=false & pids+=($!)
	mkdir -p "$tmp/nginx/logs"
	# nginx with limit_req keyed by client address, at a rate every
	# request passes, like the floodgate proxy's limit: both decide every
	# request and refuse none. Two workers, as floodgate has two cores.
	cat >"$tmp/nginx/nginx.conf" <<NGINX
worker_processes 2;
daemon on;
pid $tmp/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	client_body_temp_path $tmp/nginx/body;
	proxy_temp_path $tmp/nginx/proxy;
	fastcgi_temp_path $tmp/nginx/fastcgi;
	uwsgi_temp_path $tmp/nginx/uwsgi;
	scgi_temp_path $tmp/nginx/scgi;
	limit_req_zone \$binary_remote_addr zone=api:10m rate=1000000r/s;
	upstream up { server 127.0.0.1:$up; keepalive 256; }
	server {
		listen 127.0.0.1:$ngx;
		location / {
			limit_req zone=api burst=1000000 nodelay;
			proxy_pass http://up;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
		}
	}
}
NGINX
	/usr/sbin/nginx -p "$tmp/nginx" -c "$tmp/nginx/nginx.conf"
	for p in $up $on $off $ngx; do wait_port "$p"; done
	# Warm every target's connections.
	for p in $on $off $ngx; do wrk -t2 -c"$WRK_C" -d1s "http://127.0.0.1:$p/" >/dev/null; done
	echo "# (a) wrk -t2 -c$WRK_C -d$WRK_D --latency, $ROUNDS interleaved rounds, order rotated"
	targets=(off:$off on:$on nginx:$ngx)
	for r in $(seq "$ROUNDS"); do
		# The order rotates per round, so a drift of the machine's load
		# does not always favour the same target.
		k=$(( (r - 1) % 3 ))
		for t in "${targets[@]:k}" "${targets[@]:0:k}"; do
			name=${t%%:*}; port=${t#*:}
			out=$(wrk -t2 -c"$WRK_C" -d"$WRK_D" --latency "http://127.0.0.1:$port/")
			rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")
			p99=$(awk '$1 == "99%" {print $2}' <<<"$out")
			non2xx=$(awk '/Non-2xx/ {print $NF}' <<<"$out")
			echo "proxy round=$r target=$name requests/s=$rps p99=$p99 non2xx=${non2xx:-0}"
		done
	done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	pids=()
	kill "$(cat "$tmp/nginx.pid")"; rm -f "$tmp/nginx.pid"
fi

if [[ " ${parts[*]} " == *" decisions "* ]]; then
	rport=$(free_port)
	redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no --daemonize no --logfile "$tmp/redis.log" --dir "$tmp" & pids+=($!)
	wait_port "$rport"
	echo "# (b)/(c) load generator: 32 callers over 4 connections (and check over 32), $LOAD_D per run, $ROUNDS interleaved rounds"
	for r in $(seq "$ROUNDS"); do
		for keys in 1 65536; do
			# check over 32 connections too: HTTP/1.1 carries one request
			# at a time per connection, so 4 connections mean 4 in flight.
			for spec in engine:4 envoy:4 check:4 check:32; do
				echo -n "decisions round=$r "
				"$bin" load -redis "127.0.0.1:$rport" -api "${spec%%:*}" -keys "$keys" -callers 32 -conns "${spec#*:}" -d "$LOAD_D"
			done
		done
	done
fi

if [[ " ${parts[*]} " == *" proxyvs "* ]]; then
	# BASELINE=/path/to/an/older/floodgate adds fg-on@base and
	# fg-deny@base, run beside this tree's in the same rounds.
	"$bin" proxyvs -rounds "$ROUNDS" -d "$WRK_D" -c "$WRK_C" ${BASELINE:+-baseline "$BASELINE"}
fi

if [[ " ${parts[*]} " == *" rls "* ]]; then
	# Each configuration: ROUNDS rounds of floodgate then the reference,
	# LOAD_D each, 32 callers over 4 connections; the last line of each is
	# the ratios.
	for spec in "1 1 redis 1000000000" "1 10000 redis 1000000000" "2 1 redis 1000000000" "2 10000 redis 1000000000" "1 1 hybrid 1000"; do
		read -r descs keys storage rate <<<"$spec"
		echo "# (d) rls descriptors=$descs keys=$keys storage=$storage rate=$rate/s"
		"$bin" rls -descriptors "$descs" -keys "$keys" -storage "$storage" -rate "$rate" -rounds "$ROUNDS" -d "$LOAD_D"
	done
fi

if [[ " ${parts[*]} " == *" rlslease "* ]]; then
	# Parity counting (as envoyproxy/ratelimit counts) with and without
	# leases; the same rounds as rls.
	parity='descriptors: independent;charge_denied: true'
	for spec in "1 1 lease" "2 1 lease" "1 1 off" "2 10000 lease" "2 10000 off"; do
		read -r descs keys lease <<<"$spec"
		echo "# (d) rls descriptors=$descs keys=$keys lease=$lease $(uptime)"
		"$bin" rls -descriptors "$descs" -keys "$keys" -rounds "$ROUNDS" -d "$LOAD_D" -floodgate "$parity;lease: ${lease/lease/auto}"
	done
fi
