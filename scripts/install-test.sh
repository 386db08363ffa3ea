#!/usr/bin/env bash
# Proves that every module installs as a user installs it, with no release:
# a clone of the repository's HEAD takes a throwaway release tag
# (scripts/release.sh in the clone: requirements raised, go.sum tidied,
# commit, tags), and the release's check runs against a module proxy
# directory made from those tags — go get and go build of each module, go
# install of cmd/floodgate@tag, and the user programs of
# scripts/testdata/install run in fresh modules with GOWORK=off and
# GOFLAGS=-mod=mod.
#
# floodgate's modules come only from the proxy directory made from the
# tags: nothing is published, so a build that reaches for them anywhere
# else fails. Third-party modules come from the module cache
# (file://$(go env GOMODCACHE)/cache/download), else from the configured
# module proxy: a fresh machine's cache lacks what only a user's module
# graph selects (an older version a contrib module requires, imports of
# other platforms). Checksums come from the tags' go.sum files, not the
# checksum database. Only committed work is tested.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
version=${INSTALL_TEST_VERSION:-v0.999.0}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

git clone -q "$root" "$work/repo"
cd "$work/repo"
git checkout -q "$(git -C "$root" rev-parse HEAD)"
export GIT_AUTHOR_NAME=floodgate GIT_AUTHOR_EMAIL=release@floodgate.invalid
export GIT_COMMITTER_NAME=floodgate GIT_COMMITTER_EMAIL=release@floodgate.invalid
export RELEASE_GOPROXY="file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)" RELEASE_OFFLINE=1
scripts/release.sh "$version"
