package middleware

import (
	"net/http"
	"strconv"
	"time"

	"github.com/zeebo/xxh3"
)

// response is what the cache stores for a request: everything needed to
// answer it again, and the request header values it was rendered for.
//
// A response read from the cache is read-only: with the cache's near cache
// on (cache.Options.Near) every hit on an entry returns the same decoded
// response, header map, body and Vary slices included, to every request
// it answers, concurrently. write copies what it hands to a
// ResponseWriter; the vary index keeps Vary as it is and only reads it.
type response struct {
	Status     int
	Header     http.Header
	Body       []byte
	Stored     int64    // Unix ms when its age was 0: when rendered, less its age then (see initialAge)
	FreshUntil int64    // Unix ms
	Vary       []string // canonical names from the response's Vary
	VaryValues []string // the rendering request's values of those headers

	// RevalidateFrom is when (Unix ms) the response's stale window ends
	// if it is kept past it to be revalidated (see revalidate.go): from
	// then on it is never served without a conditional render first. 0:
	// not kept (no validator of the handler's), the entry ends with its
	// stale window.
	RevalidateFrom int64
	// GraceUntil is until when (Unix ms) the response may be served past
	// RevalidateFrom when the render that would replace it fails
	// (Freshness.StaleIfError); 0: never.
	GraceUntil int64
	// HandlerETag says the ETag is the handler's, which a revalidation
	// sends as If-None-Match, and not a digest of the body the middleware
	// added (storedHeader).
	HandlerETag bool
	// Tags are the page's tags (Options.Tags) with the epochs of their
	// records its render saw (see tags.go).
	Tags []tagRef
	// StaleWindow is how long (ms) the response may be served stale past
	// FreshUntil while one render refreshes it (httprule.Verdict.Stale);
	// 0: never, or stored before this field was (see softpurge.go).
	StaleWindow int64
	// Version is random, drawn for each render and each freshening: it
	// names this stored response in its revalidation's key (see
	// revalidate), which two versions never share, whatever their times.
	Version uint64
}

// dropOnStore reports the headers that are not stored: hop-by-hop ones
// describe one connection, not the response (RFC 9110 7.6.1); Age is
// recomputed when serving (from Stored, which counts the Age received).
// Date is kept: it says when the origin made the response (RFC 9110
// 6.6.1).
func dropOnStore(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Age", "Set-Cookie":
		return true
	}
	return false
}

// storedHeader copies the end-to-end headers of h and adds an ETag
// derived from the body if the handler set none, and a Date (when the
// response was received, responded) if it has none, as RFC 9110 6.6.1
// asks of a cache. Names are compared, and stored, in canonical form
// (storable has merged h's already).
func storedHeader(h http.Header, body []byte, responded time.Time) http.Header {
	out := make(http.Header, len(h)+1)
	for k, vs := range h {
		if ck := http.CanonicalHeaderKey(k); !dropOnStore(ck) {
			out[ck] = append(out[ck], vs...)
		}
	}
	if out.Get("Etag") == "" {
		out.Set("Etag", `"`+strconv.FormatUint(xxh3.Hash(body), 36)+`"`)
	}
	if out["Date"] == nil {
		out["Date"] = []string{responded.UTC().Format(http.TimeFormat)}
	}
	out.Set("Content-Length", strconv.Itoa(len(body)))
	return out
}

// matches reports whether r has the same values, for the headers resp
// varies on, as the request resp was rendered for.
func (resp *response) matches(r *http.Request) bool {
	if len(resp.Vary) != len(resp.VaryValues) {
		return false
	}
	for i, name := range resp.Vary {
		if headerValue(r.Header, name) != resp.VaryValues[i] {
			return false
		}
	}
	return true
}

func (resp *response) fresh(now time.Time) bool { return now.UnixMilli() < resp.FreshUntil }

// graceful reports whether resp may answer at now in place of a render
// that failed (see Freshness.StaleIfError).
func (resp *response) graceful(now time.Time) bool { return now.UnixMilli() < resp.GraceUntil }

// mustRevalidate reports whether resp, kept past its stale window, may be
// served only after a revalidation (see revalidate.go).
func (resp *response) mustRevalidate(now time.Time) bool {
	return resp.RevalidateFrom != 0 && now.UnixMilli() >= resp.RevalidateFrom && !resp.fresh(now)
}

// marker reports whether resp is the marker of a base's variants (see
// toStore), not a response: it has Vary names and no status.
func (resp *response) marker() bool { return resp.Status == 0 && len(resp.Vary) > 0 }

// validators reports whether resp has a validator of the handler's to
// revalidate with: its ETag (not a digest the middleware made), or a
// Last-Modified.
func (resp *response) validators() bool {
	return resp.HandlerETag && first(resp.Header, "Etag") != "" || first(resp.Header, "Last-Modified") != ""
}

// result is what a render or a cache lookup produced.
type result struct {
	resp      response
	err       error
	fresh     time.Duration // how long the response stays fresh, from when it was rendered
	stale     time.Duration // the stale window the response asked for
	notStored bool          // rendered for the cache, which did not write it (renderFor)
	status    int           // the render's status (the response's, or what the handler sent when it is not stored); 0 for a lookup's result
}

// century bounds the lifetimes and stale windows a response is kept past
// to be revalidated: beyond it (options set huge for "forever") there is
// nothing to keep it for, and the times would overflow.
const century = 100 * 365 * 24 * time.Hour

// generationMarker is the marker of the generation that resp begins: its
// times and Vary, its Version, and nothing else (see toStore).
func generationMarker(resp *response) response {
	return response{Stored: resp.Stored, FreshUntil: resp.FreshUntil, Vary: resp.Vary, Version: resp.Version}
}

// markerLife is how long the marker of a generation begun by res lives:
// twice as long as the response (it is a few bytes), so that the
// variants rendered after it in its generation mostly end by themselves.
func markerLife(res result) time.Duration {
	life := res.fresh + res.stale // no overflow: see render
	if life < century {
		life *= 2
	}
	return life
}

// tagRef is a tag of a stored page, with the epoch of its record the
// page's render saw.
type tagRef struct {
	_     struct{} `msgpack:",as_array"`
	Name  string
	Epoch uint64
	// Soft is the record's soft epoch the render saw, or the one known
	// before it began when a soft purge may have overtaken it (see
	// registerTags); 0 in a page stored before soft purges.
	Soft uint64
}

// tagStamp is the record of a tag in the cache.
type tagStamp struct {
	_        struct{} `msgpack:",as_array"`
	Epoch    uint64   // random: drawn by each purge, and when the record is made
	PurgedAt int64    // Unix ms of the last purge, by the purging process's clock; 0: none
	Soft     uint64   // random: drawn by each soft purge and each purge; 0: none since the record was made (and in a record written before soft purges)
	SoftAt   int64    // Unix ms of the last soft purge, by the purging process's clock; 0: none
}
