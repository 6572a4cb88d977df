package middleware

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"strings"
)

// recorder captures a handler's response so that it can be stored. It
// holds at most limit body bytes: past that, or when the handler hijacks,
// or flushes a response that cannot be stored anyway (see Flush), it
// turns into a pass-through to the real ResponseWriter (if there is one)
// and the response is not stored. A flush of a response that may still be
// stored is a hint about latency only: the recorder goes on recording. It
// never writes after the handler has returned: the middleware does that.
type recorder struct {
	w      http.ResponseWriter // nil when rendering in the background
	limit  int
	header http.Header
	status int
	body   bytes.Buffer

	// revalidating: the handler was sent the stored response's
	// validators, so a 304 answers the middleware, not the client: it is
	// held (never passed through, its body discarded) to freshen the
	// stored response with (see revalidate.go).
	revalidating bool

	passing bool                // headers and body go straight to w; nothing is stored
	reason  string              // why the response cannot be stored, if it cannot
	onPass  func(h http.Header) // adds headers when switching to pass-through

	// refuses says why the response, as its status and header stand,
	// cannot be stored whatever the handler writes next, or "" (see
	// Flush); nil: only an event stream cannot.
	refuses func() string
}

func newRecorder(w http.ResponseWriter, limit int) *recorder {
	return &recorder{w: w, limit: limit, header: make(http.Header)}
}

func (rec *recorder) Header() http.Header {
	if rec.passing && rec.w != nil {
		return rec.w.Header()
	}
	return rec.header
}

func (rec *recorder) WriteHeader(code int) {
	if code < 200 { // informational: forward, it is not the response
		if rec.w != nil && code != http.StatusSwitchingProtocols {
			rec.interim(code)
		}
		return
	}
	if rec.status != 0 {
		return // superfluous, as net/http says
	}
	rec.status = code
	if rec.passing && rec.w != nil {
		rec.w.WriteHeader(code)
	}
}

func (rec *recorder) Write(p []byte) (int, error) {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.held() {
		return len(p), nil // a 304 has no body (RFC 9110 15.4.5)
	}
	if !rec.passing && rec.body.Len()+len(p) > rec.limit {
		rec.pass("body larger than the store limit")
	}
	if rec.passing {
		if rec.w == nil {
			return len(p), nil
		}
		return rec.w.Write(p)
	}
	return rec.body.Write(p)
}

// interim sends an informational (1xx) response, such as 103 Early
// Hints, to the client with the header fields the handler has set (net/http
// sends what the header map holds at that moment; httputil.ReverseProxy
// puts the origin's 1xx fields there and clears them after). They go out
// with the 1xx only: the client's header map is restored after it, and
// the recorded header, which is what may be stored, is not touched, so a
// 1xx never becomes part of a stored response or of the final one.
func (rec *recorder) interim(code int) {
	if rec.passing {
		rec.w.WriteHeader(code) // the handler writes into the client's header map
		return
	}
	h := rec.w.Header()
	saved := h.Clone()
	for k, vs := range rec.header {
		h[k] = vs
	}
	rec.w.WriteHeader(code)
	clear(h)
	for k, vs := range saved {
		h[k] = vs
	}
}

// pass switches to pass-through: what was recorded so far goes out first.
func (rec *recorder) pass(reason string) {
	if rec.passing {
		return
	}
	rec.passing, rec.reason = true, reason
	if rec.w == nil {
		return
	}
	h := rec.w.Header()
	for k, vs := range rec.header {
		h[k] = vs
	}
	if rec.onPass != nil {
		rec.onPass(h)
	}
	if rec.status != 0 {
		rec.w.WriteHeader(rec.status)
	}
	if rec.body.Len() > 0 {
		_, _ = rec.w.Write(rec.body.Bytes())
	}
	rec.body = bytes.Buffer{}
}

// held reports whether the response is a 304 to the middleware's own
// conditions, which never reaches the client as it is.
func (rec *recorder) held() bool {
	return rec.revalidating && rec.status == http.StatusNotModified && !rec.passing
}

// Flush is a hint about latency, not a refusal to be stored. A response
// that may still be stored goes on being recorded: nothing is sent, it is
// stored if it completes within the limit (past it, it passes through,
// see Write), and its client gets it when the render ends, as for any
// stored render. A response that cannot be stored anyway, as its status
// and header stand at the flush (an event stream, or one the storage
// rules refuse: see refuses), passes through at once and is flushed, so
// that a stream reaches its client as it is written. A held 304 stays
// held: it has nothing to stream.
func (rec *recorder) Flush() {
	if rec.status == 0 {
		rec.WriteHeader(http.StatusOK)
	}
	if rec.held() {
		return
	}
	if !rec.passing {
		reason := ""
		switch {
		case eventStream(rec.header):
			reason = "an event stream (text/event-stream)"
		case rec.refuses != nil:
			reason = rec.refuses()
		}
		if reason == "" {
			return // kept: stored when it completes
		}
		rec.pass(reason)
	}
	if rec.w != nil {
		_ = http.NewResponseController(rec.w).Flush()
	}
}

// eventStream reports whether h (the handler's, in any letter case) says
// the body is a stream of Server-Sent Events: Content-Type
// text/event-stream, with any parameters, in any case. Such a response is
// never complete until its handler returns, so it always streams.
func eventStream(h http.Header) bool {
	for k, vs := range h {
		if len(vs) == 0 || !strings.EqualFold(k, "Content-Type") {
			continue
		}
		mt, _, _ := strings.Cut(vs[0], ";")
		if strings.EqualFold(strings.Trim(mt, " \t"), "text/event-stream") {
			return true
		}
	}
	return false
}

// Hijack hands the connection to the handler; nothing is stored.
func (rec *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if rec.w == nil {
		return nil, nil, errors.New("middleware: cannot hijack a background render")
	}
	rec.passing, rec.reason = true, "the handler hijacked the connection"
	return http.NewResponseController(rec.w).Hijack()
}

// Unwrap lets http.ResponseController reach the real writer for what the
// recorder does not handle itself (deadlines).
func (rec *recorder) Unwrap() http.ResponseWriter { return rec.w }
