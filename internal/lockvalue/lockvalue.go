// Package lockvalue is the stored value of a stampede lock, shared by
// package lock, which writes it, and package cache, which must tell a lock
// (its rebuild claim) from its own data in the keys they share. It is the
// format only: what cache does with a lock goes through lock's public API.
package lockvalue

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// A lock's stored value is
//
//	token ";" since ";" metadata
//
// token: 32 lowercase hex characters (128 random bits), unique per
// acquisition; since: Unix milliseconds when it was obtained; metadata: the
// caller's text, possibly empty, possibly containing ';'. The whole value
// is what release and refresh compare, so it identifies the acquisition.
const TokenLen = 32

// NewToken returns a new random token.
func NewToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go >= 1.24)
	return hex.EncodeToString(b[:])
}

// Encode returns the stored value of an acquisition.
func Encode(token string, since time.Time, metadata string) string {
	var b strings.Builder
	b.Grow(TokenLen + 15 + len(metadata))
	b.WriteString(token)
	b.WriteByte(';')
	b.WriteString(strconv.FormatInt(since.UnixMilli(), 10))
	b.WriteByte(';')
	b.WriteString(metadata)
	return b.String()
}

// Value is a decoded lock value.
type Value struct {
	Token    string
	Since    time.Time
	Metadata string
}

// Decode parses a stored value; ok is false for values package lock did
// not write.
func Decode(v string) (val Value, ok bool) {
	if len(v) < TokenLen+3 || v[TokenLen] != ';' {
		return Value{}, false
	}
	for i := range TokenLen {
		c := v[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return Value{}, false
		}
	}
	rest := v[TokenLen+1:]
	i := strings.IndexByte(rest, ';')
	if i <= 0 || i > 19 {
		return Value{}, false
	}
	ms, err := strconv.ParseInt(rest[:i], 10, 64)
	if err != nil || ms < 0 {
		return Value{}, false
	}
	return Value{Token: v[:TokenLen], Since: time.UnixMilli(ms), Metadata: rest[i+1:]}, true
}
