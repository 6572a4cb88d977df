// Package codec defines how a cache entry is stored: a small fixed header
// followed by the encoded value (and, in failure.go, the marker a failed
// rebuild leaves beside it).
//
//	offset size
//	0      1    magic 0xF5 (not printable, not a hex digit: never a lock value)
//	1      1    format version, 1
//	2      1    flags: bit 0 = "not found" (a cached negative result),
//	            bit 1 = "no stale window" (fresh until the server drops it)
//	3      8    written at, Unix ms, big endian
//	11     8    fresh until, Unix ms
//	19     4    duration of the load that produced it, µs (for early refresh)
//	23     -    payload, the user codec's bytes
//
// A reader that meets another version or anything malformed reports it as
// undecodable; the cache treats that as a miss and replaces the entry, so
// a future version can be rolled out next to this one.
package codec

import (
	"encoding/binary"
	"errors"
	"math"
	"time"
)

const (
	magic      = 0xF5
	version1   = 1
	headerSize = 23

	flagNotFound = 1 << 0
	flagNoStale  = 1 << 1
	knownFlags   = flagNotFound | flagNoStale
)

// ErrFormat is returned for bytes that are not an entry of a known version.
var ErrFormat = errors.New("codec: not a stampede cache entry of a known format")

// Entry is a decoded cache entry. Payload aliases the decoded bytes.
type Entry struct {
	Written    time.Time
	FreshUntil time.Time
	LoadTime   time.Duration
	NotFound   bool
	// NoStale marks an entry written without a stale window: readers
	// never serve it as stale, even in the moment between FreshUntil and
	// the server's expiry, which starts when the write arrives.
	NoStale bool
	Payload []byte
}

// Append appends the encoding of e to dst.
func Append(dst []byte, e Entry) []byte {
	var h [headerSize]byte
	h[0], h[1] = magic, version1
	if e.NotFound {
		h[2] |= flagNotFound
	}
	if e.NoStale {
		h[2] |= flagNoStale
	}
	binary.BigEndian.PutUint64(h[3:], uint64(e.Written.UnixMilli()))
	binary.BigEndian.PutUint64(h[11:], uint64(e.FreshUntil.UnixMilli()))
	us := e.LoadTime.Microseconds()
	binary.BigEndian.PutUint32(h[19:], uint32(min(max(us, 0), math.MaxUint32)))
	dst = append(dst, h[:]...)
	return append(dst, e.Payload...)
}

// Decode parses b. It never panics; bytes of another format or version
// return ErrFormat.
func Decode(b []byte) (Entry, error) {
	if len(b) < headerSize || b[0] != magic || b[1] != version1 || b[2]&^knownFlags != 0 {
		return Entry{}, ErrFormat
	}
	return Entry{
		NotFound:   b[2]&flagNotFound != 0,
		NoStale:    b[2]&flagNoStale != 0,
		Written:    time.UnixMilli(int64(binary.BigEndian.Uint64(b[3:]))),
		FreshUntil: time.UnixMilli(int64(binary.BigEndian.Uint64(b[11:]))),
		LoadTime:   time.Duration(binary.BigEndian.Uint32(b[19:])) * time.Microsecond,
		Payload:    b[headerSize:],
	}, nil
}

// IsEntry reports whether b starts like an entry of any version; used to
// tell entries from lock values and foreign data.
func IsEntry(b []byte) bool { return len(b) > 0 && b[0] == magic }
