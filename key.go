package floodgate

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxKeyLen is the longest key kept as it is. Longer keys are replaced by
// "sha256:" and the hex digest of the key.
const MaxKeyLen = 192

// NormalizeKey returns key, or its digest when key is longer than MaxKeyLen.
//
// Long keys are hashed rather than truncated: two keys that share a long
// prefix (a URL, a JWT) stay distinct, so neither can be starved by the other
// and neither escapes its own limit. Every engine stores normalised keys, so a
// key costs the same memory in Redis and in process whatever a client sends.
func NormalizeKey(key string) string {
	if len(key) <= MaxKeyLen {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}
