package middleware

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/failpoint"
)

// render runs next for r through a recorder. With w set, a response that
// cannot be stored has been passed through to w by the time render
// returns (err set); without w it is discarded.
//
// With prior set (a stored response for r, stale), the render
// refreshes it: if prior has validators of the handler's, it revalidates
// it: the handler gets prior's validators as conditions
// (and nothing else of the client's, see prepareRender), and a 304
// freshens prior (see freshened), which then goes through the same rules
// as a new response; a 304 that names another representation (see
// selects) makes it render again without conditions. Any other answer
// is a new response.
//
// j.seen are the epochs of tag records known before the render began (see
// registerTags). Only j's prior, seen and x are read.
func (m *Middleware) render(w http.ResponseWriter, r *http.Request, next http.Handler, j *job) result {
	prior, seen := j.prior, j.seen
	// A HEAD routed to a handler of its own (a HEAD route) is rendered by
	// that handler, whatever the render's method: its answer has no body
	// and never answers a GET (see routedAsHead).
	headRoute := r.Method == http.MethodHead && routedAsHead(r)
	rr, rec, requested, responded, prior := m.runSelecting(w, r, next, prior, headRoute)
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
	if reason == "" {
		reason = renderRefusal(r, rr, rec, headRoute, freshening, handlerETag, lifetime)
	}
	if reason != "" && prior != nil && rec.status >= 500 && !rec.passing && prior.graceful(responded) &&
		m.holds(rr.Context(), j.x, prior) {
		// The render that would replace prior failed, within prior's
		// grace, and prior is still stored: prior answers instead (see
		// renderFor and revalidate).
		return result{err: errFailedGraceful{errNotStored{reason}}, status: rec.status}
	}
	var tags []tagRef
	if reason == "" && len(m.tagHeaders) > 0 {
		var purged bool
		tags, reason, purged = m.renderTags(rr.Context(), rec, prior, freshening, requested, seen)
		if purged {
			rec.pass(reason) // out to its own client only: see registerTags
			return result{err: errPurgedDuringRender{errNotStored{reason}, tags}, status: rec.status}
		}
	}
	if reason != "" {
		rec.pass(reason)                                        // out to the client, if there is one, and not stored
		if !headRoute && m.endsStored(rec.status, rec.header) { // a HEAD route's says nothing of the GET's
			return result{err: errEndsStored{errNotStored{reason}}, status: rec.status}
		}
		return result{err: errNotStored{reason}, status: rec.status}
	}
	res := m.toResult(r, rec, responded, handlerETag, age, lifetime, stale)
	res.resp.Tags = tags
	res.status = rec.status
	failpoint.Inject(r.Context(), failpoint.MiddlewareRendered)
	return res
}

// renderTags registers the tags of the render recorded in rec, begun at
// requested (see registerTags), and unless Tags.Keep removes their
// fields from what is stored. A freshened response whose 304 names no
// tags keeps prior's.
func (m *Middleware) renderTags(ctx context.Context, rec *recorder, prior *response, freshening bool, requested time.Time, seen []tagRef) (tags []tagRef, reason string, purged bool) {
	names, reason := parseTags(rec.header, m.tagHeaders)
	if reason != "" {
		return nil, reason, false
	}
	if !m.o.Tags.Keep {
		for _, n := range m.tagHeaders {
			delete(rec.header, n)
		}
	}
	if len(names) == 0 && freshening {
		names = tagNames(prior.Tags)
	}
	if len(names) == 0 {
		return nil, "", false
	}
	return m.registerTags(ctx, names, requested, seen)
}

// runSelecting runs r once (see run), revalidating prior if set; when
// the handler answers with a 304 that names another representation than
// prior's (see selects), it runs r again without conditions, and prior
// is then nil.
func (m *Middleware) runSelecting(w http.ResponseWriter, r *http.Request, next http.Handler, prior *response, headRoute bool) (*http.Request, *recorder, time.Time, time.Time, *response) {
	restoreRoute := func() {}
	if prior != nil {
		restoreRoute = saveRoute(r.Context()) // for a second run
	}
	rr, rec, requested, responded := m.run(w, r, next, prior, headRoute)
	if rec.held() && !selects(prior, rec.header) {
		// The 304 names another representation than prior's (RFC 9111
		// 4.3.4: none is selected, nothing is freshened): ask again
		// without conditions, for the current one. The held 304 sent
		// nothing to the client.
		restoreRoute()
		prior = nil
		rr, rec, requested, responded = m.run(w, r, next, nil, headRoute)
	}
	return rr, rec, requested, responded, prior
}

// renderRefusal says why a render (rr, the request run for r, recorded
// in rec) that storable lets through, with this lifetime, may still not
// be stored, or "": it went out to its client, it is a HEAD's, its body
// is incomplete, its request ended, or it is a no-cache response without
// a validator of the handler's (handlerETag: its ETag is the handler's).
func renderRefusal(r, rr *http.Request, rec *recorder, headRoute, freshening, handlerETag bool, lifetime time.Duration) string {
	switch {
	case rec.passing:
		return rec.reason
	case headRoute:
		return "a HEAD route's render"
	case r.Method == http.MethodHead && !freshening && rec.body.Len() == 0:
		// A router that dispatches by method before the middleware runs
		// (one the middleware cannot ask) gives a HEAD to its HEAD
		// handler, which writes no body: an empty render for a HEAD may
		// be that, so it answers no GET.
		return "an empty render for a HEAD request"
	case !freshening && !completeBody(rec.header, rec.body.Len()):
		// RFC 9111 3.4: an incomplete response is not a complete one.
		// Passed through with the handler's Content-Length, its client
		// is not told otherwise either: net/http ends the connection
		// short of the length declared.
		return "a body of another length than its Content-Length"
	case rr.Context().Err() != nil:
		// The client went away (or the load timed out) during the render;
		// whatever the handler wrote then is no answer for anyone else.
		return "the request ended during the render"
	case lifetime <= 0 && !handlerETag && rec.header["Last-Modified"] == nil:
		// A no-cache response (RevalidateNoCache) is stored only to be
		// revalidated; storable saw an ETag, but a freshened one's may
		// be the middleware's digest, which the handler does not know.
		return "no-cache without a validator of the handler's"
	}
	return ""
}

// toResult is the stored response of a render recorded in rec for r,
// received at responded, with the age, lifetime and stale window
// storable gave it, and how long the cache keeps it.
func (m *Middleware) toResult(r *http.Request, rec *recorder, responded time.Time, handlerETag bool, age, lifetime, stale time.Duration) result {
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
	keep, grace := m.keepFor(&resp, lifetime), m.graceFor(rec.header)
	if keep = max(keep, grace); keep > 0 && lifetime < century && stale < century {
		// Kept past its stale window, to be revalidated and never served
		// meanwhile without that (see serve), but when that fails within
		// its grace.
		resp.RevalidateFrom = born.Add(lifetime).Add(stale).UnixMilli()
		if grace > 0 && grace < century {
			resp.GraceUntil = born.Add(lifetime).Add(stale).Add(grace).UnixMilli()
		}
		stale = min(stale, math.MaxInt64-max(lifetime-age, 0)-keep) + keep // the entry lives fresh+stale: no overflow
	}
	return result{resp: resp, fresh: lifetime - age, stale: stale}
}

// run renders r once, through a recorder, on a request for the cache (see
// prepareRender): a GET, but for a HEAD route's, with prior's validators
// as conditions when prior is set.
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, prior *response, headRoute bool) (*http.Request, *recorder, time.Time, time.Time) {
	rr := r.Clone(r.Context())
	if rr.Method == http.MethodHead && !headRoute {
		rr.Method = http.MethodGet // store the body, for GETs too
	}
	m.prepareRender(rr)
	revalidating := prior != nil && prior.validators() // else prior is there for its grace only
	if revalidating {
		conditions(rr.Header, prior)
	}
	rec := newRecorder(w, m.limit)
	rec.revalidating = revalidating
	rec.onPass = func(h http.Header) {
		m.setStatus(h, status{x: "BYPASS", fwd: "miss", fwdStatus: rec.status, detail: "not-stored"})
		giveToClient(rr.Context()) // the response is its client's alone now
	}
	rec.refuses = func() string { return m.flushRefusal(r, rec) }
	requested := m.now()
	next.ServeHTTP(rec, rr)
	responded := m.now()
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	return rr, rec, requested, responded
}

// routedAsHead reports whether r was routed as a HEAD before the
// middleware ran (it is mounted on a route): a net/http ServeMux pattern
// for HEAD ("HEAD /x"), or chi's routing method (r.With(m.Handler).Head,
// or a sub-router's r.Use, whose routing follows the method its parent
// routed by). The handler then is the HEAD route's, whatever method the
// render has.
func routedAsHead(r *http.Request) bool {
	if method, _, ok := strings.Cut(r.Pattern, " "); ok && method == http.MethodHead {
		return true
	}
	return routeMethod(r) == http.MethodHead
}

// completeBody reports whether a body of n bytes is as long as the
// Content-Length of h (canonical) says, as net/http reads it: the first
// value, if it is a non-negative integer (net/http drops any other, and
// the body is then as long as it is). Values that disagree leave the
// length unknown, which is not complete either.
func completeBody(h http.Header, n int) bool {
	vs := h["Content-Length"]
	if len(vs) == 0 {
		return true
	}
	for _, v := range vs[1:] {
		if v != vs[0] {
			return false
		}
	}
	declared, err := strconv.ParseInt(vs[0], 10, 64)
	return err != nil || declared < 0 || declared == int64(n)
}

// selects reports whether a 304 with header h (the handler's) selects
// prior for update (RFC 9111 4.3.4): its ETag, if it has one, matches
// prior's (by the strong comparison when it is strong, the weak one when
// it is weak; prior's must be the handler's, not a digest of the body),
// and its Vary, if it has one, names the fields prior's does.
func selects(prior *response, h http.Header) bool {
	canonicalHeader(h)
	if etag := strings.TrimSpace(first(h, "Etag")); etag != "" {
		stored := ""
		if prior.HandlerETag {
			stored = strings.TrimSpace(first(prior.Header, "Etag"))
		}
		weak, ok := strings.CutPrefix(etag, "W/")
		switch {
		case stored == "":
			return false
		case ok && strings.TrimPrefix(stored, "W/") != weak:
			return false
		case !ok && stored != etag:
			return false
		}
	}
	if h["Vary"] != nil {
		names, star := parseVary(h)
		if star || !slices.Equal(names, prior.Vary) {
			return false
		}
	}
	return true
}

// endsStored reports whether a response with this status and header
// (canonical), which may not be stored, also ends the stored response
// that its render refreshed: the handler now says the resource is not to
// be shared (no-store, private, a cookie, Vary: *), so what was stored
// must not be served again, stale or not. A server error does not:
// serving stale through errors is what stale-if-error is for.
func (m *Middleware) endsStored(status int, h http.Header) bool {
	if status >= 500 {
		return false
	}
	cc := m.responseControl(h)
	_, star := parseVary(h)
	return cc.storeForbidden(status) || cc.private || len(h.Values("Set-Cookie")) > 0 || star
}

// errFailedGraceful is the error of a render that failed (a 5xx) while
// the stored response it would replace was within its grace
// (Freshness.StaleIfError): nothing was sent, and the stored response
// answers. It is an errNotStored too.
type errFailedGraceful struct{ errNotStored }

func (e errFailedGraceful) Unwrap() error { return e.errNotStored }

// graceFor is how long a response with header h (canonical) is kept
// past its stale window to answer in place of a failed render: its own
// stale-if-error (RFC 5861 4), or Freshness.StaleIfError, whichever is
// longer; 0 when its directives forbid serving it stale (s-maxage forbids
// this cache's own leave, not the response's).
func (m *Middleware) graceFor(h http.Header) time.Duration {
	cc := m.responseControl(h)
	if cc.mustRevalidate || cc.proxyRevalidate || cc.noCache {
		return 0
	}
	grace := cc.staleIfError
	if !cc.hasSMaxAge {
		grace = max(grace, m.o.Freshness.StaleIfError)
	}
	return grace
}

// errEndsStored is the error of a render whose response may not be stored
// and ends the stored response the render refreshed (see endsStored). It
// is an errNotStored too.
type errEndsStored struct{ errNotStored }

func (e errEndsStored) Unwrap() error { return e.errNotStored }

// century bounds the lifetimes and stale windows a response is kept past
// to be revalidated: beyond it (options set huge for "forever") there is
// nothing to keep it for, and the times would overflow.
const century = 100 * 365 * 24 * time.Hour

// renderAndStore renders r itself (a client's no-cache) and stores the
// response in place of the one stored for r, if it may be stored and
// the key still holds that one when the render ends: a purge, a write's
// invalidation or another render meanwhile wins (SetIfUnchanged; see
// purgerule.go). With nothing stored for r there is nothing to
// bypass: r is a miss like any other (serve), which renders under the
// cache's claim, or shares the render in flight.
func (m *Middleware) renderAndStore(w http.ResponseWriter, r *http.Request, next http.Handler, base, route string) outcome {
	x := &exchange{w: w, r: r, next: next, base: base, route: route}
	var p peeked
	for range 2 { // again if the index changed (see find)
		x.at = m.placeOf(base, r)
		var current bool
		if p, current = m.find(r.Context(), x.at); current {
			break
		}
	}
	if p.err != nil && !errors.Is(p.err, cache.ErrStale) || p.found.Raw == nil || p.resp.marker() {
		return m.serveExchange(x)
	}
	// Nobody waits for this render: it lives and dies with its client.
	// It is stored before its answer goes out (see renderFor), which then
	// says whether it was.
	j := &job{ctx: r.Context(), done: make(chan result, 1), seen: p.resp.Tags, fwd: "request"}
	var err error
	j.stored = func() bool {
		res := <-j.done
		if !slices.Equal(x.at.vary, res.resp.Vary) {
			// Another Vary than the key's generation: its client's
			// alone (a new generation is made by a render the others
			// wait for, see toStore).
			return false
		}
		err = m.e.SetIfUnchanged(r.Context(), x.at.key, res.resp, p.found.Raw, max(res.fresh, time.Millisecond), res.stale)
		if errors.Is(err, engine.ErrChanged) {
			err = nil // purged, invalidated or rendered again meanwhile: that stands
			return false
		}
		return err == nil
	}
	res := m.renderFor(w, r, next, j, w)
	if res.err != nil {
		return rendered(res)
	}
	return outcome{kind: EventMiss, reason: "the client's no-cache", err: err}
}
