#!/usr/bin/env bash
# Release floodgate's modules together:
#
#   scripts/release.sh VERSION            e.g. v0.3.0
#   scripts/release.sh -verify VERSION    only check that the tags of VERSION resolve
#
# floodgate is one main module and the framework adapters contrib/*, each a
# module of its own that requires the main module at a real version (no
# replace directive, no test-only module), as go-redis releases its extra/*
# modules. A release:
#
#   1. makes every requirement on floodgate's modules (contrib/*/go.mod,
#      examples/*/go.mod) and the replace lines of go.work name VERSION;
#   2. tidies the contrib and example modules against this tree as VERSION,
#      served from a module proxy directory made from the work tree, so
#      that their go.sum hold the hashes the tags will have;
#   3. commits that, and tags the commit VERSION and contrib/<name>/VERSION;
#   4. verifies the tags: a module proxy directory made from them, and in a
#      fresh module with neither replace nor workspace, go get and go build
#      of every module at VERSION and go install of cmd/floodgate@VERSION.
#
# It pushes nothing; it prints the push command, and the command that builds
# the binary's archives of the tag (scripts/archives.sh VERSION). Third-party modules come
# from the module cache, then from GOPROXY as go env reports it (set
# RELEASE_GOPROXY to override).
set -euo pipefail

verify_only=false
if [ "${1:-}" = "-verify" ]; then
	verify_only=true
	shift
fi
if [ $# -ne 1 ]; then
	echo "usage: scripts/release.sh [-verify] VERSION" >&2
	exit 2
fi
version=$1
root=$(git rev-parse --show-toplevel)
cd "$root"
cache=$(go env GOMODCACHE)
upstream=${RELEASE_GOPROXY:-file://$cache/cache/download,$(go env GOPROXY)}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd scripts/modtool && GOWORK=off go build -o "$work/modtool" .)
modtool() { "$work/modtool" "$@"; }

# go runs as a user's build does: no workspace, versions resolved through
# the proxy list, floodgate's own (untagged or local) modules exempt from
# the checksum database. Its module cache is a fresh one: the shared cache
# would keep floodgate's modules at these versions as first fetched, and
# serve them to every later check, whatever the tree then holds.
gouser() {
	env GOMODCACHE="$work/modcache" GOWORK=off GOFLAGS="-mod=mod -modcacherw" GONOSUMDB=github.com/floodgate-go \
		GONOPROXY= GOPRIVATE= go "$@"
}

mapfile -t modules < <(modtool modules)
contrib=()
for m in "${modules[@]}"; do
	[ "$m" = . ] || contrib+=("$m")
done
examples=()
for f in examples/*/go.mod; do
	examples+=("$(dirname "$f")")
done

tag_of() {
	if [ "$1" = . ]; then echo "$version"; else echo "$1/$version"; fi
}

if ! $verify_only; then
	if [ -n "$(git status --porcelain)" ]; then
		echo "release: the work tree has changes; commit or stash them first" >&2
		exit 1
	fi
	for m in "${modules[@]}"; do
		if git rev-parse -q --verify "refs/tags/$(tag_of "$m")" >/dev/null; then
			echo "release: tag $(tag_of "$m") exists already" >&2
			exit 1
		fi
	done
	modtool setversion -version "$version"
	# Tidying a module can change its go.mod, which the modules that require
	# it read from the proxy: repeat until nothing changes.
	for round in 1 2 3 4; do
		before=$(git diff | git hash-object --stdin)
		rm -rf "$work/proxy"
		modtool proxy -version "$version" -out "$work/proxy"
		for m in "${contrib[@]}" "${examples[@]}"; do
			(cd "$m" && GOPROXY="file://$work/proxy,$upstream" gouser mod tidy)
		done
		[ "$(git diff | git hash-object --stdin)" != "$before" ] || break
		if [ "$round" = 4 ]; then
			echo "release: go mod tidy keeps changing the go.mod files" >&2
			exit 1
		fi
	done
	modtool check
	git add -A -- go.work '*go.mod' '*go.sum'
	git commit -q -m "floodgate $version"
	for m in "${modules[@]}"; do
		git tag -a -m "floodgate $version" "$(tag_of "$m")"
	done
fi

# Verify: every module at VERSION from its own tag, as a proxy would serve it.
rm -rf "$work/proxy"
for m in "${modules[@]}"; do
	git rev-parse -q --verify "refs/tags/$(tag_of "$m")" >/dev/null || {
		echo "release: no tag $(tag_of "$m")" >&2
		exit 1
	}
done
modtool proxy -version "$version" -out "$work/proxy" -rev "refs/tags/$version"
for m in "${contrib[@]}"; do
	if [ "$(git rev-parse "$(tag_of "$m")^{commit}")" != "$(git rev-parse "$version^{commit}")" ]; then
		echo "release: tag $(tag_of "$m") is not on the commit of $version" >&2
		exit 1
	fi
done
# The fresh modules' go.sum start from the tags' go.sum files: the hashes
# that the release's tidy checked, so third-party modules are verified
# against them without the checksum database (RELEASE_OFFLINE=1 runs with
# no network at all; go install @version reads no go.sum, so it then skips
# the database: the modules it builds are the ones verified here first).
seed_sum() {
	for m in "${modules[@]}"; do
		f=go.sum
		[ "$m" = . ] || f=$m/go.sum
		git -C "$root" show "refs/tags/$(tag_of "$m"):$f"
	done | sort -u >go.sum
}
paths=()
for m in "${modules[@]}"; do
	p=github.com/floodgate-go/floodgate
	[ "$m" = . ] || p=$p/$m
	paths+=("$p")
done
export GOPROXY="file://$work/proxy,$upstream"
mkdir "$work/user" "$work/bin"
(
	cd "$work/user"
	gouser mod init example.com/release-check >/dev/null 2>&1
	seed_sum
	for p in "${paths[@]}"; do
		gouser get "$p@$version"
		gouser build "$p/..."
	done
)
sumdb=(GOSUMDB="$(go env GOSUMDB)")
[ "${RELEASE_OFFLINE:-}" != 1 ] || sumdb=(GOSUMDB=off)
gouser_env() {
	local e=$1
	shift
	env "$e" GOMODCACHE="$work/modcache" GOWORK=off GOFLAGS="-mod=mod -modcacherw" GONOSUMDB=github.com/floodgate-go \
		GONOPROXY= GOPRIVATE= go "$@"
}
(cd "$work" && GOBIN="$work/bin" gouser_env "${sumdb[@]}" install "github.com/floodgate-go/floodgate/cmd/floodgate@$version")
got=$("$work/bin/floodgate" version)
case "$got" in
*" $version "*) ;;
*)
	echo "release: floodgate version says \"$got\", want $version" >&2
	exit 1
	;;
esac
"$work/bin/floodgate" validate "$root/examples/config/redis-hybrid.yaml"

# The programs a user writes first, one fresh module each: every one
# serves on loopback and checks what its clients see.
for prog in "$root"/scripts/testdata/install/*/; do
	name=$(basename "$prog")
	dir=$work/programs/$name
	mkdir -p "$dir"
	cp "$prog"/*.go "$dir/"
	(
		cd "$dir"
		gouser mod init "example.com/$name" >/dev/null 2>&1
		seed_sum
		gouser get "${paths[@]/%/@$version}"
		gouser mod tidy
		gouser run . || {
			echo "release: the $name program failed" >&2
			exit 1
		}
	)
	echo "release: program $name: ok"
done
echo "release: floodgate $version: every module resolves and builds from its tag."
if ! $verify_only; then
	tags=()
	for m in "${modules[@]}"; do tags+=("$(tag_of "$m")"); done
	echo "push with: git push origin HEAD ${tags[*]}"
	echo "archives of the binary, with SHA256SUMS and SBOMs: scripts/archives.sh $version"
fi
