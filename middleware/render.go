package middleware

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/httprule"
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
	d, prior := m.runSelecting(w, r, next, prior, headRoute)
	rr, rec, requested, responded := d.rr, d.rec, d.requested, d.responded
	d.freshening = rec.held()
	if d.freshening {
		// Not modified: prior, with the 304's fields, is the response.
		rec.header = freshened(prior.Header, rec.header, responded)
		rec.status = prior.Status
		rec.body.Reset()
		rec.body.Write(prior.Body)
	}
	v := m.storable(r, rec, requested, responded)
	// After storable, which merged the letter cases of rec's names.
	d.handlerETag = rec.header["Etag"] != nil
	if d.freshening {
		d.handlerETag = prior.HandlerETag // the ETag is prior's (httprule.KeptOnUpdate)
	}
	d.life = min(v.Lifetime, century) + min(v.Stale, century) + min(v.Grace, century)
	reason := v.Reason
	if reason == "" {
		reason = renderRefusal(r, d, v.Lifetime)
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
		tags, reason, purged = m.renderTags(rr.Context(), d, prior, seen)
		if purged {
			rec.pass(reason) // out to its own client only: see registerTags
			return result{err: errPurgedDuringRender{errNotStored{reason}, tags}, status: rec.status}
		}
	}
	if reason != "" {
		rec.pass(reason)                                                   // out to the client, if there is one, and not stored
		if !headRoute && httprule.Ends(rec.status, rec.header, &m.rules) { // a HEAD route's says nothing of the GET's
			return result{err: errEndsStored{errNotStored{reason}}, status: rec.status}
		}
		return result{err: errNotStored{reason}, status: rec.status}
	}
	res := m.toResult(r, d, responded, v)
	res.resp.Tags = tags
	res.status = rec.status
	failpoint.Inject(r.Context(), failpoint.MiddlewareRendered)
	return res
}

// recorded is one run of the handler for the cache (see run), as render
// and the rules after storable judge it: the request it ran with, what
// it recorded, when, and how.
type recorded struct {
	rr                   *http.Request // the request the handler ran with
	rec                  *recorder
	requested, responded time.Time     // when the handler was called, and when it returned
	headRoute            bool          // a HEAD route's render (see routedAsHead)
	freshening           bool          // a 304 freshened prior: rec holds prior, updated (set by render)
	handlerETag          bool          // rec's ETag is the handler's, not a digest of the body (set by render)
	life                 time.Duration // how long the cache keeps the response, as storable judged it (set by render)
}

// renderTags registers the tags of the render d (see registerTags), and
// unless Tags.Keep removes their fields from what is stored. A freshened
// response whose 304 names no tags keeps prior's.
func (m *Middleware) renderTags(ctx context.Context, d *recorded, prior *response, seen []tagRef) (tags []tagRef, reason string, purged bool) {
	rec := d.rec
	names, reason := parseTags(rec.header, m.tagHeaders)
	if reason != "" {
		return nil, reason, false
	}
	if !m.o.Tags.Keep {
		for _, n := range m.tagHeaders {
			delete(rec.header, n)
		}
	}
	if len(names) == 0 && d.freshening {
		names = tagNames(prior.Tags)
	}
	if len(names) == 0 {
		return nil, "", false
	}
	return m.registerTags(ctx, names, d.requested, seen, d.life)
}

// runSelecting runs r once (see run), revalidating prior if set; when
// the handler answers with a 304 that names another representation than
// prior's (see selects), it runs r again without conditions, and prior
// is then nil.
func (m *Middleware) runSelecting(w http.ResponseWriter, r *http.Request, next http.Handler, prior *response, headRoute bool) (*recorded, *response) {
	restoreRoute := func() {}
	if prior != nil {
		restoreRoute = saveRoute(r.Context()) // for a second run
	}
	d := m.run(w, r, next, prior, headRoute)
	if d.rec.held() && !selects(prior, d.rec.header) {
		// The 304 names another representation than prior's (RFC 9111
		// 4.3.4: none is selected, nothing is freshened): ask again
		// without conditions, for the current one. The held 304 sent
		// nothing to the client.
		restoreRoute()
		prior = nil
		d = m.run(w, r, next, nil, headRoute)
	}
	return d, prior
}

// renderRefusal says why a render d for r that storable lets through,
// with this lifetime, may still not be stored, or "": it went out to its
// client, it is a HEAD's, its body is incomplete, its request ended, or
// it is a no-cache response without a validator of the handler's.
func renderRefusal(r *http.Request, d *recorded, lifetime time.Duration) string {
	rec := d.rec
	switch {
	case rec.passing:
		return rec.reason
	case d.headRoute:
		return "a HEAD route's render"
	case r.Method == http.MethodHead && !d.freshening && rec.body.Len() == 0:
		// A router that dispatches by method before the middleware runs
		// (one the middleware cannot ask) gives a HEAD to its HEAD
		// handler, which writes no body: an empty render for a HEAD may
		// be that, so it answers no GET.
		return "an empty render for a HEAD request"
	case !d.freshening && !httprule.CompleteBody(rec.header, rec.body.Len()):
		// RFC 9111 3.4: an incomplete response is not a complete one.
		// Passed through with the handler's Content-Length, its client
		// is not told otherwise either: net/http ends the connection
		// short of the length declared.
		return "a body of another length than its Content-Length"
	case d.rr.Context().Err() != nil:
		// The client went away (or the load timed out) during the render;
		// whatever the handler wrote then is no answer for anyone else.
		return "the request ended during the render"
	case lifetime <= 0 && !d.handlerETag && rec.header["Last-Modified"] == nil:
		// A no-cache response (RevalidateNoCache) is stored only to be
		// revalidated; storable saw an ETag, but a freshened one's may
		// be the middleware's digest, which the handler does not know.
		return "no-cache without a validator of the handler's"
	}
	return ""
}

// toResult is the stored response of a render d for r, received at
// responded, with the age, lifetime, stale window and grace of storable's
// verdict v, and how long the cache keeps it.
func (m *Middleware) toResult(r *http.Request, d *recorded, responded time.Time, v httprule.Verdict) result {
	rec, age, lifetime, stale, grace := d.rec, v.Age, v.Lifetime, v.Stale, v.Grace
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
		Vary: vary, VaryValues: values, HandlerETag: d.handlerETag, Version: rand.Uint64(),
		StaleWindow: min(stale, century).Milliseconds(),
	}
	keep := max(m.rules.Keep(lifetime, resp.validators()), grace)
	if keep > 0 && lifetime < century && stale < century {
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
func (m *Middleware) run(w http.ResponseWriter, r *http.Request, next http.Handler, prior *response, headRoute bool) *recorded {
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
	return &recorded{rr: rr, rec: rec, requested: requested, responded: responded, headRoute: headRoute}
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

// selects reports whether a 304 with header h (the handler's, merged
// into canonical names here) selects prior for update (see
// httprule.Selects).
func selects(prior *response, h http.Header) bool {
	canonicalHeader(h)
	return httprule.Selects(prior.Header, prior.HandlerETag, prior.Vary, h)
}

// storable applies the storage rules (httprule.Store) to a response
// recorded in rec, rendered for r at requested and received at
// responded, and returns their verdict: why it may not be stored, or its
// age, lifetime, stale window and grace.
//
// It first merges header fields the handler set in another letter case
// than the canonical one (w.Header()["set-cookie"]) into rec's canonical
// names, so that the rules and the header drops of storedHeader see
// them.
func (m *Middleware) storable(r *http.Request, rec *recorder, requested, responded time.Time) httprule.Verdict {
	canonicalHeader(rec.header)
	return httprule.Store(&httprule.Response{
		Status: rec.status, Header: rec.header,
		Requested: requested, Responded: responded,
		Size: storedSize(r, rec),
	}, &m.rules)
}

// flushRefusal says why the response rec records for r cannot be
// stored, judged as the storage rules (storable) judge it at the end
// of the render, on its status and header as they stand now, or "". It
// is rec.refuses for a render (see run). The body so far counts towards
// the size limits; the rules that need the whole body or the render's
// end (an incomplete body, the request ending) are left to the end.
func (m *Middleware) flushRefusal(r *http.Request, rec *recorder) string {
	h := rec.header
	defer func() { rec.header = h }()
	rec.header = h.Clone() // storable merges the letter cases of the names
	now := m.now()
	return m.storable(r, rec, now, now).Reason
}
