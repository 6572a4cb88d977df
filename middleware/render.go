package middleware

import (
	"math"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/hotkv/stampede/cache"
)

// render runs next for r through a recorder. With w set, a response that
// cannot be stored has been passed through to w by the time render
// returns (err set); without w it is discarded.
//
// With prior set (a stored response for r, stale), the render
// revalidates it: the handler gets prior's validators as conditions
// (and nothing else of the client's, see prepareRender), and a 304
// freshens prior (see freshened), which then goes through the same rules
// as a new response. Any other answer is a new response.
func (m *Middleware) render(w http.ResponseWriter, r *http.Request, next http.Handler, prior *response) result {
	rr := r.Clone(r.Context())
	if rr.Method == http.MethodHead {
		rr.Method = http.MethodGet // store the body, for GETs too
	}
	m.prepareRender(rr)
	if prior != nil {
		conditions(rr.Header, prior)
	}
	rec := newRecorder(w, m.limit)
	rec.revalidating = prior != nil
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
	freshening := rec.held()
	if freshening {
		// Not modified: prior, with the 304's fields, is the response.
		rec.header = freshened(prior.Header, rec.header, responded)
		rec.status = prior.Status
		rec.body.Reset()
		rec.body.Write(prior.Body)
	}
	reason, age, lifetime, stale := m.storable(r, rec, requested, responded)
	// After storable, which merged the letter cases of rec's names.
	handlerETag := rec.header["Etag"] != nil
	if freshening {
		handlerETag = prior.HandlerETag // the ETag is prior's (keptOnUpdate)
	}
	switch {
	case reason != "":
	case rec.passing:
		reason = rec.reason
	case rr.Context().Err() != nil:
		// The client went away (or the load timed out) during the render;
		// whatever the handler wrote then is no answer for anyone else.
		reason = "the request ended during the render"
	case lifetime <= 0 && !handlerETag && rec.header["Last-Modified"] == nil:
		// A no-cache response (RevalidateNoCache) is stored only to be
		// revalidated; storable saw an ETag, but a freshened one's may
		// be the middleware's digest, which the handler does not know.
		reason = "no-cache without a validator of the handler's"
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
	resp := response{
		Status: rec.status, Header: storedHeader(rec.header, body, responded), Body: body,
		Stored: born.UnixMilli(), FreshUntil: born.Add(lifetime).UnixMilli(),
		Vary: vary, VaryValues: values, HandlerETag: handlerETag, Version: rand.Uint64(),
	}
	if keep := m.keepFor(&resp, lifetime); keep > 0 && lifetime < century && stale < century {
		// Kept past its stale window, to be revalidated and never served
		// meanwhile without that (see serve).
		resp.RevalidateFrom = born.Add(lifetime).Add(stale).UnixMilli()
		stale = min(stale, math.MaxInt64-max(lifetime-age, 0)-keep) + keep // the entry lives fresh+stale: no overflow
	}
	return result{resp: resp, fresh: lifetime - age, stale: stale}
}

// century bounds the lifetimes and stale windows a response is kept past
// to be revalidated: beyond it (options set huge for "forever") there is
// nothing to keep it for, and the times would overflow.
const century = 100 * 365 * 24 * time.Hour

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
