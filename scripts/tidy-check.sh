#!/usr/bin/env bash
# Checks that the go.mod and go.sum of every contrib and example module are
# what go mod tidy makes of them against this tree: the modules are tidied
# in copies, with floodgate's modules served at the version they require
# from a module proxy directory made from the work tree. go.sum lines of
# floodgate's own modules are left out of the comparison: they hold the
# hashes of the released tags, which scripts/release.sh writes.
#
#   scripts/tidy-check.sh        check
#   scripts/tidy-check.sh -fix   write the tidy go.mod and go.sum back
set -euo pipefail
fix=false
[ "${1:-}" != -fix ] || fix=true
root=$(git rev-parse --show-toplevel)
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd scripts/modtool && GOWORK=off go build -o "$work/modtool" .)
version=$("$work/modtool" version)
cache=$(go env GOMODCACHE)
"$work/modtool" proxy -version "$version" -out "$work/proxy"
status=0
for m in $("$work/modtool" modules | grep -v '^\.$') examples/*/go.mod; do
	m=${m%/go.mod}
	copy=$work/copy/$m
	mkdir -p "$copy"
	cp -r "$m"/. "$copy"
	# A fresh module cache: the shared one would keep floodgate's modules
	# at this version as first fetched, whatever the tree holds later.
	(cd "$copy" && env GOMODCACHE="$work/modcache" GOWORK=off GOFLAGS="-mod=mod -modcacherw" GONOSUMDB=github.com/floodgate-go \
		GONOPROXY= GOPRIVATE= GOPROXY="file://$work/proxy,file://$cache/cache/download,$(go env GOPROXY)" go mod tidy)
	own='^github\.com/floodgate-go/'
	if ! cmp -s "$m/go.mod" "$copy/go.mod" ||
		! diff -q <(grep -v "$own" "$m/go.sum" || true) <(grep -v "$own" "$copy/go.sum" || true) >/dev/null; then
		if $fix; then
			cp "$copy/go.mod" "$m/go.mod"
			# The tidy file's lines in its order, with the released hashes of
			# floodgate's modules where the tree's would stand.
			awk -v own="$own" 'NR == FNR { if ($0 ~ own) keep = keep $0 "\n"; next }
				$0 ~ own { if (!done) printf "%s", keep; done = 1; next } { print }' "$m/go.sum" "$copy/go.sum" >"$work/sum"
			cp "$work/sum" "$m/go.sum"
			echo "$m: tidied"
			continue
		fi
		echo "$m: go.mod or go.sum is not tidy:"
		diff -u "$m/go.mod" "$copy/go.mod" || true
		diff -u <(grep -v "$own" "$m/go.sum" || true) <(grep -v "$own" "$copy/go.sum" || true) || true
		echo "run: scripts/tidy-check.sh -fix"
		status=1
	fi
done
exit $status
