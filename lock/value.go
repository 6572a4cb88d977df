package lock

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
const tokenLen = 32

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go >= 1.24)
	return hex.EncodeToString(b[:])
}

func encodeValue(token string, since time.Time, metadata string) string {
	var b strings.Builder
	b.Grow(tokenLen + 15 + len(metadata))
	b.WriteString(token)
	b.WriteByte(';')
	b.WriteString(strconv.FormatInt(since.UnixMilli(), 10))
	b.WriteByte(';')
	b.WriteString(metadata)
	return b.String()
}

// Info is what Inspect reads about a lock.
type Info struct {
	Token    string        // the holder's token
	Since    time.Time     // when the holder obtained it, by the holder's clock
	Metadata string        // what the holder attached (ObtainOptions.Metadata)
	TTL      time.Duration // time left before it expires; -1 if it never does
}

// decodeValue parses a stored value; ok is false for values this package
// did not write.
func decodeValue(v string) (info Info, ok bool) {
	if len(v) < tokenLen+3 || v[tokenLen] != ';' {
		return Info{}, false
	}
	for i := range tokenLen {
		c := v[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return Info{}, false
		}
	}
	rest := v[tokenLen+1:]
	i := strings.IndexByte(rest, ';')
	if i <= 0 || i > 19 {
		return Info{}, false
	}
	ms, err := strconv.ParseInt(rest[:i], 10, 64)
	if err != nil || ms < 0 {
		return Info{}, false
	}
	return Info{Token: v[:tokenLen], Since: time.UnixMilli(ms), Metadata: rest[i+1:]}, true
}
