package middleware

import (
	"net/http"
	"time"

	"github.com/hotkv/stampede/cache"
)

// render runs next for r through a recorder. With w set, a response that
// cannot be stored has been passed through to w by the time render
// returns (err set); without w it is discarded.
func (m *Middleware) render(w http.ResponseWriter, r *http.Request, next http.Handler) result {
	rr := r.Clone(r.Context())
	if rr.Method == http.MethodHead {
		rr.Method = http.MethodGet // store the body, for GETs too
	}
	m.prepareRender(rr)
	rec := newRecorder(w, m.limit)
	rec.onPass = func(h http.Header) {
		m.setStatus(h, statusBypass)
		giveToClient(rr.Context()) // the response is its client's alone now
	}
	requested := m.now()
	next.ServeHTTP(rec, rr)
	responded := m.now()
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	reason, age, lifetime, stale := m.storable(r, rec, requested, responded)
	switch {
	case reason != "":
	case rec.passing:
		reason = rec.reason
	case rr.Context().Err() != nil:
		// The client went away (or the load timed out) during the render;
		// whatever the handler wrote then is no answer for anyone else.
		reason = "the request ended during the render"
	}
	if reason != "" {
		rec.pass(reason) // out to the client, if there is one, and not stored
		return result{err: errNotStored{reason}}
	}
	body := append([]byte(nil), rec.body.Bytes()...)
	vary, _ := parseVary(rec.header)
	values := make([]string, len(vary))
	for i, name := range vary {
		values[i] = headerValue(r.Header, name)
	}
	// Stored is when the response's age was 0: its age is counted from
	// there (Age on every answer), and so is its lifetime.
	born := responded.Add(-age)
	return result{
		resp: response{
			Status: rec.status, Header: storedHeader(rec.header, body, responded), Body: body,
			Stored: born.UnixMilli(), FreshUntil: born.Add(lifetime).UnixMilli(),
			Vary: vary, VaryValues: values,
		},
		fresh: lifetime - age,
		stale: stale,
	}
}

// renderAndStore renders r itself (a client's no-cache) and stores the
// response if it may be stored.
func (m *Middleware) renderAndStore(w http.ResponseWriter, r *http.Request, next http.Handler, base string) outcome {
	// Nobody waits for this render: it lives and dies with its client.
	j := &job{ctx: r.Context(), done: make(chan result, 1)}
	res := m.renderFor(w, r, next, j)
	if res.err != nil {
		return rendered(res)
	}
	m.vary.put(base, res.resp.Vary)
	key := variantKey(base, res.resp.Vary, r)
	err := cache.Set(r.Context(), m.c, key, res.resp, cache.WithTTL(max(res.fresh, time.Millisecond)), cache.WithStaleTTL(res.stale))
	if err == nil && len(res.resp.Vary) > 0 {
		m.registered(r.Context(), base, key, res)
	}
	return outcome{kind: EventMiss, reason: "the client's no-cache", err: err}
}
