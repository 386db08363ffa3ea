#!/usr/bin/env bash
# Release archives of the floodgate binary:
#
#   scripts/archives.sh [-out DIR] [-platforms 'linux/amd64 …'] [REV]
#
# builds cmd/floodgate from a clean clone of REV (default HEAD; committed
# work only, so the binary records its commit and the version the go
# command derives from the tags: the tag on REV, else a pseudo-version)
# for every platform (default linux/amd64 linux/arm64 darwin/amd64
# darwin/arm64), and writes to DIR (default build/release):
#
#   floodgate_VERSION_OS_ARCH.tar.gz             floodgate_VERSION_OS_ARCH/{floodgate,README.md,LICENSE}
#   floodgate_VERSION_OS_ARCH.tar.gz.spdx.json   the SBOM: the modules linked in, from the binary's build information
#   SHA256SUMS                                   sha256sum's format, of every file above
#
# (LICENSE when the repository has one.) The build is reproducible: a static
# binary (CGO_ENABLED=0) with no paths (-trimpath) and no build ID, as a
# user's build sees the module (GOWORK=off), in archives whose every
# timestamp is SOURCE_DATE_EPOCH (default: the commit's time) with their
# entries sorted and owned by 0:0, gzip without a name or time. The same
# commit and Go toolchain give the same SHA256SUMS; make release-check
# (scripts/release-check.sh) checks it.
set -euo pipefail

root=$(git rev-parse --show-toplevel)
out=$root/build/release
platforms="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"
while [ $# -gt 0 ]; do
	case $1 in
	-out)
		out=$2
		shift 2
		;;
	-platforms)
		platforms=$2
		shift 2
		;;
	-*)
		echo "usage: scripts/archives.sh [-out DIR] [-platforms 'linux/amd64 …'] [REV]" >&2
		exit 2
		;;
	*) break ;;
	esac
done
rev=${1:-HEAD}
commit=$(git -C "$root" rev-parse --verify "$rev^{commit}")
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct "$commit")}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A clone, not the work tree: it holds only what is committed, and its .git
# is a directory the go command reads the commit and tags from (it does not
# recognise a linked worktree's).
git clone -q --no-checkout "$root" "$work/src"
git -C "$work/src" -c advice.detachedHead=false checkout -q "$commit"
(cd "$root/scripts/modtool" && GOWORK=off go build -o "$work/modtool" .)

mkdir -p "$out"
out=$(cd "$out" && pwd)
made=()
for p in $platforms; do
	os=${p%/*}
	arch=${p#*/}
	bin=$work/bin/$os-$arch/floodgate
	(cd "$work/src" && env GOWORK=off GOFLAGS=-buildvcs=true CGO_ENABLED=0 GOOS="$os" GOARCH="$arch" \
		go build -trimpath -ldflags='-s -w -buildid=' -o "$bin" ./cmd/floodgate)
	version=$(go version -m "$bin" | awk '$1 == "mod" { print $3 }')
	case $version in
	"" | "(devel)")
		echo "archives: the binary records no version (go version -m says \"$version\")" >&2
		exit 1
		;;
	esac
	name=floodgate_${version}_${os}_${arch}
	dir=$work/stage/$name
	mkdir -p "$dir"
	cp "$bin" "$dir/floodgate"
	for f in README.md LICENSE LICENSE.md LICENSE.txt; do
		[ ! -f "$work/src/$f" ] || cp "$work/src/$f" "$dir/$f"
	done
	chmod 0755 "$dir" "$dir/floodgate"
	find "$dir" -type f ! -name floodgate -exec chmod 0644 {} +
	tar -C "$work/stage" --sort=name --mtime="@$SOURCE_DATE_EPOCH" --owner=0 --group=0 --numeric-owner \
		--format=ustar -cf - "$name" | gzip -9 -n >"$out/$name.tar.gz"
	"$work/modtool" sbom -name "$name" -out "$out/$name.tar.gz.spdx.json" "$bin"
	made+=("$name.tar.gz" "$name.tar.gz.spdx.json")
done
(cd "$out" && sha256sum "${made[@]}" >SHA256SUMS)
echo "archives: ${#made[@]} files and SHA256SUMS in $out (commit $commit, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH)"
