package middleware

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/zeebo/xxh3"
)

// response is what the cache stores for a request: everything needed to
// answer it again, and the request header values it was rendered for.
type response struct {
	Status     int
	Header     http.Header
	Body       []byte
	Stored     int64    // Unix ms when rendered
	FreshUntil int64    // Unix ms
	Vary       []string // canonical names from the response's Vary
	VaryValues []string // the rendering request's values of those headers
}

// hopByHop headers describe one connection, not the response (RFC 9110
// 7.6.1); Age and Date are recomputed when serving.
func dropOnStore(name string) bool {
	switch name {
	case "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Age", "Date", "Set-Cookie":
		return true
	}
	return false
}

// storedHeader copies the end-to-end headers of h and adds an ETag
// derived from the body if the handler set none.
func storedHeader(h http.Header, body []byte) http.Header {
	out := make(http.Header, len(h)+1)
	for k, vs := range h {
		if !dropOnStore(k) {
			out[k] = append([]string(nil), vs...)
		}
	}
	if out.Get("Etag") == "" {
		out.Set("Etag", `"`+strconv.FormatUint(xxh3.Hash(body), 36)+`"`)
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

// write answers r with resp, adding Age and the status header, and a 304
// when r's If-None-Match matches the ETag.
func (m *Middleware) write(w http.ResponseWriter, r *http.Request, resp *response, status string) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = append([]string(nil), vs...)
	}
	age := max(0, m.now().UnixMilli()-resp.Stored) / 1000
	h.Set("Age", strconv.FormatInt(age, 10))
	m.setStatus(h, status)
	if etag := resp.Header.Get("Etag"); etag != "" && noneMatch(r.Header.Values("If-None-Match"), etag) {
		h.Del("Content-Length")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(resp.Body)
	}
}

// noneMatch reports whether an If-None-Match field matches etag, by the
// weak comparison RFC 9110 13.1.2 prescribes.
func noneMatch(fields []string, etag string) bool {
	weak := func(t string) string { return strings.TrimPrefix(strings.TrimSpace(t), "W/") }
	want := weak(etag)
	for _, f := range fields {
		for _, t := range strings.Split(f, ",") {
			if t = strings.TrimSpace(t); t == "*" || (t != "" && weak(t) == want) {
				return true
			}
		}
	}
	return false
}

func (m *Middleware) setStatus(h http.Header, status string) {
	if m.o.StatusHeader != "-" {
		h.Set(m.statusHeader, status)
	}
	detail := map[string]string{
		statusHit: "hit", statusStale: "hit; fwd=stale", statusMiss: "fwd=miss; stored", statusBypass: "fwd=bypass",
	}[status]
	h.Set("Cache-Status", "stampede; "+detail)
}

// Values of the status header.
const (
	statusHit    = "HIT"
	statusStale  = "STALE"
	statusMiss   = "MISS"
	statusBypass = "BYPASS"
)

func (resp *response) fresh(now time.Time) bool { return now.UnixMilli() < resp.FreshUntil }
