package redisx

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"

	"github.com/zeebo/xxh3"
)

// Digest returns the digest Redis >= 8.4 computes for a stored value
// (DIGEST, IFDEQ): XXH3-64 with seed 0, as exactly 16 lowercase hex
// characters, zero padded.
func Digest(v string) string {
	var buf [16]byte
	s := strconv.AppendUint(buf[:0], xxh3.HashString(v), 16)
	if len(s) == 16 {
		return string(s)
	}
	out := make([]byte, 16)
	for i := range 16 - len(s) {
		out[i] = '0'
	}
	copy(out[16-len(s):], s)
	return string(out)
}

// SHA1Hex returns the hex SHA-1 of v, as Lua's redis.sha1hex computes it on
// the server: the digest used where the server has no DIGEST.
func SHA1Hex(v string) string {
	sum := sha1.Sum([]byte(v))
	return hex.EncodeToString(sum[:])
}
