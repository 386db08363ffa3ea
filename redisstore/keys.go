package redisstore

import (
	"strconv"
	"strings"

	"github.com/floodgate-go/floodgate/algo"
)

// appendKey appends the Redis key of rule i of set for key to b:
//
//	<prefix>{<policy>:<set>:<key>}:<i><tag>
//
// The policy and set names are escaped (see appendEscaped) so that the
// first colon after the brace ends the policy and the second ends the set
// name; the client key is escaped so that the first '}' after the brace is
// the one closing it. Distinct (policy, set, key) triples therefore give
// distinct keys, and Redis Cluster hashes each by all three: a client
// cannot send keys that cut the hash tag short and pile onto one slot.
func appendKey(b []byte, prefix string, set *algo.Set, key string, i int) []byte {
	b = append(b, prefix...)
	b = append(b, '{')
	b = appendEscaped(b, set.Policy(), nameEscapes)
	b = append(b, ':')
	b = appendEscaped(b, set.Variant(), nameEscapes)
	b = append(b, ':')
	b = appendEscaped(b, key, keyEscapes)
	b = append(b, '}', ':')
	b = strconv.AppendInt(b, int64(i), 10)
	return append(b, keyTags[set.At(i).Kind()])
}

// Key returns the Redis key that holds the state of limit i (from 0, in the
// order of set.Rules) of set for key under prefix, in the layout the
// package documentation describes. Operators use it to find or inspect a
// client's state; key must already be normalised (floodgate.NormalizeKey),
// as the Limiter passes it to the Store.
func Key(prefix string, set *algo.Set, key string, i int) string {
	return string(appendKey(nil, prefix, set, key, i))
}

// The bytes percent-encoded in policy and set names, and in client keys.
// A client key needs no escaped colon: it runs to the closing brace.
const (
	nameEscapes = "%:{}"
	keyEscapes  = "%}"
)

// appendEscaped appends s with the bytes of escapes percent-encoded
// (upper-case hex), '%' among them so that the encoding stays reversible.
func appendEscaped(b []byte, s, escapes string) []byte {
	if !strings.ContainsAny(s, escapes) {
		return append(b, s...)
	}
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(escapes, c) >= 0 {
			b = append(b, '%', hex[c>>4], hex[c&15])
			continue
		}
		b = append(b, c)
	}
	return b
}

// hashTag returns the part of key that Redis Cluster hashes: the text
// between the first '{' and the first '}' after it, when not empty, else the
// whole key.
func hashTag(key []byte) []byte {
	for i, c := range key {
		if c != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key
				}
				return key[i+1 : j]
			}
		}
		return key
	}
	return key
}

// slotOf is the Redis Cluster slot of key: CRC16 (XMODEM) of its hash tag,
// modulo 16384.
func slotOf(key []byte) int {
	var crc uint16
	for _, c := range hashTag(key) {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^c]
	}
	return int(crc) & 16383
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()
