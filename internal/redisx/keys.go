package redisx

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
	"unsafe"
)

// MaxPlainKey is the longest user key kept as written inside a stampede
// key; longer ones are hashed by Tag.
const MaxPlainKey = 128

// Tag returns k in a form safe to place between braces as a Redis Cluster
// hash tag: k itself when it is short printable text without braces, else
// "#" followed by the lowercase hex SHA-256 of k (65 bytes; the same as
// `printf %s "$k" | sha256sum` prints). No plain key starts with "#", so a
// plain key never equals a hashed one.
//
// The hash is cryptographic because keys are often chosen by whoever sends
// a request (a URL, a query string): with a fast non-cryptographic hash an
// attacker could craft two keys with one tag and have one key's value served
// for the other. Finding two keys with one SHA-256 is not feasible.
func Tag(k string) string {
	if Plain(k) {
		return k
	}
	// The bytes of k, not a copy: Sum256 only reads them.
	sum := sha256.Sum256(unsafe.Slice(unsafe.StringData(k), len(k)))
	var out [1 + 2*sha256.Size]byte
	out[0] = '#'
	hex.Encode(out[1:], sum[:])
	return string(out[:])
}

// Plain reports whether k is its own Tag.
func Plain(k string) bool {
	return len(k) <= MaxPlainKey && !strings.HasPrefix(k, "#") && plain(k)
}

// plain reports whether every byte of k is printable ASCII other than a
// brace (0x21-0x7e, not '{' or '}'). It reads k eight bytes at a time: it
// runs on every near-cache hit, for the key's tag, and a byte at a time
// it cost as much as the near cache's own lookup for a key of 40 bytes.
func plain(k string) bool {
	b := unsafe.Slice(unsafe.StringData(k), len(k)) // read, never written
	for ; len(b) >= 8; b = b[8:] {
		if !plain8(binary.LittleEndian.Uint64(b)) {
			return false
		}
	}
	for _, c := range b {
		if c < 0x21 || c > 0x7e || c == '{' || c == '}' {
			return false
		}
	}
	return true
}

// plain8 is plain for the eight bytes of w. Each test below is exact as
// to whether some byte passes it, which is all plain needs (borrows and
// carries may mark other bytes too): a byte below 0x21, above 0x7e, equal
// to '{', equal to '}' ("Bit Twiddling Hacks": hasless, hasmore, haszero).
func plain8(w uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	below := (w - 0x21*ones) &^ w
	above := (w + (0x7f-0x7e)*ones) | w
	open := w ^ '{'*ones
	open = (open - ones) &^ open
	closing := w ^ '}'*ones
	closing = (closing - ones) &^ closing
	return (below|above|open|closing)&highs == 0
}

// HashTag returns the part of key that Redis Cluster hashes to pick a slot:
// the text between the first '{' and the next '}', when that is not empty,
// else the whole key.
func HashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// Sibling returns a key named for key and suffix that Redis Cluster places in
// the same hash slot as key, so both can be used by one script:
//
//	"orders:{42}"  -> "orders:{42}:fence"  (key has a hash tag: reuse it)
//	"orders:42"    -> "{orders:42}:fence"  (the whole key becomes the tag)
//
// A key that has no hash tag but contains '}' cannot be wrapped; ok is false
// and the caller must refuse it where a shared slot is required.
func Sibling(key, suffix string) (sibling string, ok bool) {
	if HashTag(key) != key {
		return key + ":" + suffix, true
	}
	if strings.IndexByte(key, '}') >= 0 {
		return key + ":" + suffix, false
	}
	return "{" + key + "}:" + suffix, true
}

// Slot is the Redis Cluster hash slot of the keys whose hash tag is tag
// (see HashTag): CRC16 (XMODEM) of tag, mod 16384.
func Slot(tag string) uint16 {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc ^= uint16(tag[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc & 16383
}
