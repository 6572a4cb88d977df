package codec

// A failed rebuild's marker: what a rebuild whose loader failed leaves
// beside the entry (in its own key, NS:{K}:fail) for a short while, so
// that a process that was waiting for that rebuild, and missed its
// announcement, still learns of the failure from the server:
//
//	offset size
//	0      1    magic 0xF6 (not printable, not a hex digit, not an entry's 0xF5)
//	1      1    format version, 1
//	2      1    n, the length of the token
//	3      n    the token of the claim (or rebuild lock) whose load failed
//	3+n    -    the error text, as announced
//
// A reader that meets another version or anything malformed finds no
// marker there (and claims the key as if it had found none), so a future
// version can be rolled out next to this one.

const (
	failureMagic    = 0xF6
	failureVersion1 = 1
	failureHeader   = 3
)

// EncodeFailure returns the marker of the rebuild holding token whose load
// failed with text. A token longer than 255 bytes is cut (lock tokens are
// 32).
func EncodeFailure(token, text string) string {
	token = token[:min(len(token), 255)]
	b := make([]byte, 0, failureHeader+len(token)+len(text))
	b = append(b, failureMagic, failureVersion1, byte(len(token)))
	b = append(b, token...)
	b = append(b, text...)
	return string(b)
}

// DecodeFailure parses a marker written by EncodeFailure; ok is false for
// bytes of another format or version. It never panics.
func DecodeFailure(b []byte) (token, text string, ok bool) {
	if len(b) < failureHeader || b[0] != failureMagic || b[1] != failureVersion1 {
		return "", "", false
	}
	n := int(b[2])
	if n == 0 || len(b) < failureHeader+n {
		return "", "", false
	}
	return string(b[failureHeader : failureHeader+n]), string(b[failureHeader+n:]), true
}
