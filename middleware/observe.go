package middleware

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// observing reports whether anybody takes Events or logs.
func (m *Middleware) observing() bool { return m.o.Observer != nil || m.o.Logger != nil }

// route returns r's Event.Route (only when observing: it allocates). A
// path never becomes a route: it may hold a secret (a reset token, a
// session in the path) and has no bound, and Event.Route is a metrics
// label.
func (m *Middleware) route(r *http.Request) string {
	if !m.observing() {
		return ""
	}
	if p := routePattern(r); p != "" {
		return p
	}
	if r.Pattern != "" {
		// net/http's ServeMux pattern, "[METHOD ][HOST]/[PATH]": without
		// the method, as chi's patterns are.
		if _, p, ok := strings.Cut(r.Pattern, " "); ok {
			return strings.TrimLeft(p, " \t")
		}
		return r.Pattern
	}
	return unknownRoute
}

// unknownRoute is Event.Route for a request no router has a pattern for
// where the middleware runs.
const unknownRoute = "unknown"

// observe logs o, the outcome of a request with method on route, and
// hands it to the Observer as an Event with the request's context ctx.
func (m *Middleware) observe(ctx context.Context, method, route string, d time.Duration, o outcome) {
	if l := m.o.Logger; l != nil {
		switch {
		case o.kind == EventBypass, o.kind == EventBackground && o.reason != "":
			l.Debug("middleware: not cached", "kind", o.kind.String(), "route", route, "reason", o.reason, "err", o.err)
		case o.kind == EventMiss && o.err != nil:
			l.Warn("middleware: storing a no-cache render failed", "route", route, "err", o.err)
		}
	}
	obs := m.o.Observer
	if obs == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil && m.o.Logger != nil {
			m.o.Logger.Error("middleware: Observer panicked", "panic", fmt.Sprint(v), "kind", o.kind.String(), "route", route)
		}
	}()
	obs(Event{Kind: o.kind, Route: route, Duration: d, Reason: o.reason, Err: o.err, Method: method, Status: o.status, Context: ctx})
}

// statusWriter notes the status of the response that goes out through
// it, for Event.Status; it changes nothing of what is written.
type statusWriter struct {
	http.ResponseWriter
	status   int  // the final status written, as net/http counts it; 0 until then
	hijacked bool // no HTTP response goes out
}

func (sw *statusWriter) WriteHeader(code int) {
	// 1xx are interim (net/http sends them and waits for the final one),
	// except 101 Switching Protocols.
	if sw.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		sw.status = code
	}
	sw.ResponseWriter.WriteHeader(code)
}

func (sw *statusWriter) Write(p []byte) (int, error) {
	sw.wrote()
	return sw.ResponseWriter.Write(p)
}

// ReadFrom keeps the ResponseWriter's own, for io.Copy (net/http's sends
// a file with sendfile).
func (sw *statusWriter) ReadFrom(src io.Reader) (int64, error) {
	sw.wrote()
	if rf, ok := sw.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(struct{ io.Writer }{sw.ResponseWriter}, src)
}

// Flush sends the header (200 if none was written) and flushes.
func (sw *statusWriter) Flush() {
	sw.wrote()
	_ = http.NewResponseController(sw.ResponseWriter).Flush()
}

// Hijack hands the connection to the handler: what it writes there is no
// response the middleware can tell the status of.
func (sw *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	sw.hijacked = true
	return http.NewResponseController(sw.ResponseWriter).Hijack()
}

// Unwrap lets http.ResponseController reach the real writer.
func (sw *statusWriter) Unwrap() http.ResponseWriter { return sw.ResponseWriter }

// wrote notes that the body or a flush starts the response: with 200
// unless WriteHeader said otherwise, as net/http does.
func (sw *statusWriter) wrote() {
	if sw.status == 0 {
		sw.status = http.StatusOK
	}
}

// sent returns Event.Status for the request answered through sw as kind.
func (sw *statusWriter) sent(kind EventKind) int {
	switch {
	case sw.hijacked, sw.status == 0 && kind == EventCanceled:
		return 0
	case sw.status == 0:
		return http.StatusOK // the handler wrote nothing: net/http sends 200
	}
	return sw.status
}
