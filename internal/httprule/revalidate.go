package httprule

import (
	"net/http"
	"slices"
	"strings"
)

// This file holds the rules of revalidation (RFC 9111 4.3): which 304
// selects a stored response for update, and which of its fields the 304
// leaves as they were stored.

// Selects reports whether a 304 with header h (canonical) selects a
// stored response for update (RFC 9111 4.3.4): its ETag, if it has one,
// matches the stored one (by the strong comparison when it is strong,
// the weak one when it is weak), and its Vary, if it has one, names the
// fields the stored response varies on. stored is the stored response's
// header, handlerETag whether its ETag is the origin's (one the cache
// made, a digest of the body, matches no ETag of the origin's), and vary
// the names it varies on (see ParseVary).
func Selects(stored http.Header, handlerETag bool, vary []string, h http.Header) bool {
	if etag := strings.TrimSpace(h.Get("Etag")); etag != "" {
		own := ""
		if handlerETag {
			own = strings.TrimSpace(stored.Get("Etag"))
		}
		weak, ok := strings.CutPrefix(etag, "W/")
		switch {
		case own == "":
			return false
		case ok && strings.TrimPrefix(own, "W/") != weak:
			return false
		case !ok && own != etag:
			return false
		}
	}
	if h["Vary"] != nil {
		names, star := ParseVary(h)
		if star || !slices.Equal(names, vary) {
			return false
		}
	}
	return true
}

// KeptOnUpdate reports whether a field of this (canonical) name keeps its
// stored value when a 304 freshens a stored response (RFC 9111 3.2):
// those that describe the stored body, which the 304 does not carry, and
// the validator it was selected by (the public HTTP cache test suite
// expects these), and Vary: the response is the variant it was stored
// as, under that variant's key.
func KeptOnUpdate(name string) bool {
	switch name {
	case "Content-Length", "Content-Encoding", "Content-Md5", "Content-Range", "Etag", "Vary":
		return true
	}
	return false
}
