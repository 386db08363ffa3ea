package floodgate

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/maphash"
	"strconv"
	"strings"
)

// MaxKeyLen is the longest key kept as it is. Longer keys are replaced by
// "sha256:" and the hex SHA-256 digest of the key.
const MaxKeyLen = 192

// digestPrefix starts every digested key.
const digestPrefix = "sha256:"

// NormalizeKey returns key, or its digest when key is longer than MaxKeyLen
// or itself starts with "sha256:", the prefix of a digest.
//
// Long keys are hashed rather than truncated: two keys that share a long
// prefix (a URL, a JWT) stay distinct, so neither can be starved by the other
// and neither escapes its own limit. Every engine stores normalised keys, so a
// key costs the same memory in Redis and in process whatever a client sends.
// A short key that looks like a digest is digested too, so no client can
// write the digest of another client's long key and share its bucket.
func NormalizeKey(key string) string {
	if len(key) <= MaxKeyLen && !strings.HasPrefix(key, digestPrefix) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return digestPrefix + hex.EncodeToString(sum[:])
}

// redactSeed keys RedactKey per process: a redacted key identifies a client
// in this process's logs without being a dictionary-attackable hash of it.
var redactSeed = maphash.MakeSeed()

// RedactKey returns a short, stable stand-in for key for logs and status
// pages: "k:" and 12 hex digits of a keyed hash. The same key gives the same
// stand-in for the life of the process, so lines about one client can be
// followed, and the key itself (an API key, an address) is not written.
func RedactKey(key string) string {
	h := maphash.String(redactSeed, key)
	s := strconv.FormatUint(h>>16, 16)
	for len(s) < 12 {
		s = "0" + s
	}
	return "k:" + s
}
