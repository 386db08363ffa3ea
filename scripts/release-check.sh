#!/usr/bin/env bash
# The release archives, checked as a user receives them (make release-check,
# part of make test): scripts/archives.sh builds the archive of this
# machine's platform from HEAD twice, from two clones in two directories,
# the second in an empty build cache, and then
#
#   1. the two SHA256SUMS are the same: the build is reproducible;
#   2. sha256sum -c SHA256SUMS passes in the directory;
#   3. the archive unpacks to floodgate_VERSION_OS_ARCH/ with the binary and
#      README.md, and floodgate version -json from it names HEAD's commit,
#      unmodified, and VERSION: the tag on HEAD, else a pseudo-version
#      ending in the commit's 12 hex digits;
#   4. the SBOM lists exactly the modules go version -m reports of that
#      binary (path and version, a replacement's version where replaced),
#      the main module at VERSION with the binary's SHA-256, and the Go
#      version.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
cd "$root"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
	echo "release-check: $*" >&2
	exit 1
}
host=$(go env GOOS)/$(go env GOARCH)
commit=$(git rev-parse HEAD)
[ -z "$(git status --porcelain)" ] ||
	echo "release-check: the work tree has changes; the archives are built from HEAD ($commit) without them"

scripts/archives.sh -out "$work/a" -platforms "$host" "$commit"
# The second build compiles everything again, in a build cache of its own.
GOCACHE=$work/gocache scripts/archives.sh -out "$work/b" -platforms "$host" "$commit"
cmp -s "$work/a/SHA256SUMS" "$work/b/SHA256SUMS" ||
	fail "two builds of $commit differ:$(diff "$work/a/SHA256SUMS" "$work/b/SHA256SUMS")"
(cd "$work/a" && sha256sum --quiet -c SHA256SUMS) || fail "sha256sum -c SHA256SUMS failed"

archive=$(cd "$work/a" && ls floodgate_*.tar.gz)
[ "$(echo "$archive" | wc -l)" = 1 ] || fail "want one archive, have: $archive"
name=${archive%.tar.gz}
mkdir "$work/unpacked"
tar -C "$work/unpacked" -xzf "$work/a/$archive"
bin=$work/unpacked/$name/floodgate
[ -x "$bin" ] || fail "$archive holds no executable $name/floodgate"
[ -f "$work/unpacked/$name/README.md" ] || fail "$archive holds no README.md"

# The version and commit the binary reports.
info=$("$bin" version -json) || fail "floodgate version -json failed"
version=$(jq -r .version <<<"$info")
[ "$(jq -r .revision <<<"$info")" = "$commit" ] || fail "floodgate version names commit $(jq -r .revision <<<"$info"), want $commit"
[ "$(jq -r .modified <<<"$info")" = false ] || fail "floodgate version says the tree was modified"
[ "$name" = "floodgate_${version}_${host%/*}_${host#*/}" ] || fail "the archive $archive is not named after the version $version"
if tag=$(git describe --exact-match --tags --match 'v*' HEAD 2>/dev/null); then
	[ "$version" = "$tag" ] || fail "floodgate version says $version, HEAD is tagged $tag"
else
	case $version in
	v*-*"${commit:0:12}") ;;
	*) fail "floodgate version says $version, want a pseudo-version of ${commit:0:12}" ;;
	esac
fi
"$bin" version | head -1 | grep -qF "floodgate $version ${commit:0:12} " || fail "floodgate version's first line: $("$bin" version | head -1)"

# The SBOM against what go version -m reports.
sbom=$work/a/$archive.spdx.json
[ "$(jq -r .spdxVersion "$sbom")" = SPDX-2.3 ] || fail "$sbom is not an SPDX 2.3 document"
go version -m "$bin" | awk '
	$1 == "dep" { if (p != "") print p, v; p = $2; v = $3 }
	$1 == "=>" { v = $3 }
	END { if (p != "") print p, v }' | sort >"$work/gomod"
jq -r '.packages[] | select(.SPDXID != "SPDXRef-Package-main" and .SPDXID != "SPDXRef-Package-stdlib") | "\(.name) \(.versionInfo)"' "$sbom" | sort >"$work/sbom"
[ -s "$work/gomod" ] || fail "go version -m reports no modules of $bin"
diff -u "$work/gomod" "$work/sbom" >&2 || fail "the SBOM's modules (+) are not those go version -m reports (-)"
main=$(jq -r '.packages[] | select(.SPDXID == "SPDXRef-Package-main") | "\(.name) \(.versionInfo) \(.checksums[0].checksumValue)"' "$sbom")
want="$(go version -m "$bin" | awk '$1 == "mod" { print $2, $3 }') $(sha256sum <"$bin" | cut -d' ' -f1)"
[ "$main" = "$want" ] || fail "the SBOM's main package is \"$main\", want \"$want\""
[ "$(jq -r '.packages[] | select(.SPDXID == "SPDXRef-Package-stdlib") | .versionInfo' "$sbom")" = "$(go version "$bin" | awk '{ print $2 }')" ] ||
	fail "the SBOM's Go version is not the binary's"
echo "release-check: $archive: reproducible, checksummed, runs as $version at ${commit:0:12}, SBOM of $(wc -l <"$work/gomod") modules matches go version -m"
