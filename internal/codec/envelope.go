// Package codec defines how a cache entry is stored: a small fixed header
// followed by the encoded value (and, in failure.go, the marker a failed
// rebuild leaves beside it).
//
//	offset size
//	0      1    magic 0xF5 (not printable, not a hex digit: never a lock value)
//	1      1    format version, 1
//	2      1    flags: bit 0 = "not found" (a cached negative result),
//	            bit 1 = "no stale window" (fresh until the server drops it)
//	            bit 2 = "tagged" (the tags section follows the header)
//	3      8    written at, Unix ms, big endian
//	11     8    fresh until, Unix ms
//	19     4    duration of the load that produced it, µs (for early refresh)
//	23     -    tags section, with bit 2 only: a count n (1 byte, 1-255),
//	            then n times: name length (2 bytes), name, hard epoch (8),
//	            soft epoch (8): the tags and their records' epochs as the
//	            load saw them before it began (see cache/tags.go)
//	-      -    payload, the user codec's bytes
//
// Bit 2 came after version 1 was released without it: a reader that does
// not know it reports a tagged entry as undecodable (a miss that replaces
// it), which is the safe reading of a value whose tags it cannot check.
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
	flagTags     = 1 << 2
	knownFlags   = flagNotFound | flagNoStale | flagTags

	// MaxTags is the most tags an entry carries, MaxTagLen the longest
	// tag name.
	MaxTags   = 255
	MaxTagLen = 1024
)

// TagRef is one tag of an entry: its name, and the epochs of the tag's
// record that the load (or Set) producing the entry read before it began.
type TagRef struct {
	Name       string
	Hard, Soft uint64
}

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
	// Tags are the entry's tags, at most MaxTags of at most MaxTagLen
	// bytes each (Append panics beyond: callers check first).
	Tags    []TagRef
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
	if len(e.Tags) > 0 {
		h[2] |= flagTags
	}
	binary.BigEndian.PutUint64(h[3:], uint64(e.Written.UnixMilli()))
	binary.BigEndian.PutUint64(h[11:], uint64(e.FreshUntil.UnixMilli()))
	us := e.LoadTime.Microseconds()
	binary.BigEndian.PutUint32(h[19:], uint32(min(max(us, 0), math.MaxUint32)))
	dst = append(dst, h[:]...)
	if len(e.Tags) > 0 {
		if len(e.Tags) > MaxTags {
			panic("codec: more than MaxTags tags")
		}
		dst = append(dst, byte(len(e.Tags)))
		for _, t := range e.Tags {
			if len(t.Name) > MaxTagLen {
				panic("codec: a tag longer than MaxTagLen")
			}
			dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.Name)))
			dst = append(dst, t.Name...)
			dst = binary.BigEndian.AppendUint64(dst, t.Hard)
			dst = binary.BigEndian.AppendUint64(dst, t.Soft)
		}
	}
	return append(dst, e.Payload...)
}

// Size is the length of e's encoding.
func Size(e Entry) int {
	n := headerSize + len(e.Payload)
	if len(e.Tags) > 0 {
		n++
		for _, t := range e.Tags {
			n += 2 + len(t.Name) + 16
		}
	}
	return n
}

// Decode parses b. It never panics; bytes of another format or version
// return ErrFormat.
func Decode(b []byte) (Entry, error) {
	if len(b) < headerSize || b[0] != magic || b[1] != version1 || b[2]&^knownFlags != 0 {
		return Entry{}, ErrFormat
	}
	e := Entry{
		NotFound:   b[2]&flagNotFound != 0,
		NoStale:    b[2]&flagNoStale != 0,
		Written:    time.UnixMilli(int64(binary.BigEndian.Uint64(b[3:]))),
		FreshUntil: time.UnixMilli(int64(binary.BigEndian.Uint64(b[11:]))),
		LoadTime:   time.Duration(binary.BigEndian.Uint32(b[19:])) * time.Microsecond,
		Payload:    b[headerSize:],
	}
	if b[2]&flagTags != 0 {
		tags, rest, ok := decodeTags(e.Payload)
		if !ok {
			return Entry{}, ErrFormat
		}
		e.Tags, e.Payload = tags, rest
	}
	return e, nil
}

// decodeTags parses the tags section at the start of b, returning the
// tags and what follows them.
func decodeTags(b []byte) (tags []TagRef, rest []byte, ok bool) {
	if len(b) < 1 || b[0] == 0 {
		return nil, nil, false
	}
	n := int(b[0])
	b = b[1:]
	tags = make([]TagRef, n)
	for i := range tags {
		if len(b) < 2 {
			return nil, nil, false
		}
		l := int(binary.BigEndian.Uint16(b))
		if l > MaxTagLen || len(b) < 2+l+16 {
			return nil, nil, false
		}
		tags[i] = TagRef{
			Name: string(b[2 : 2+l]),
			Hard: binary.BigEndian.Uint64(b[2+l:]),
			Soft: binary.BigEndian.Uint64(b[10+l:]),
		}
		b = b[2+l+16:]
	}
	return tags, b, true
}

// IsEntry reports whether b starts like an entry of any version; used to
// tell entries from lock values and foreign data.
func IsEntry(b []byte) bool { return len(b) > 0 && b[0] == magic }
