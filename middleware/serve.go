package middleware

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/httprule"
	"github.com/zeebo/xxh3"
)

// Cache returns middleware that caches responses in c for fresh (unless a
// response's Cache-Control says otherwise), for r.Use in chi or to wrap
// any http.Handler. It panics if fresh is invalid.
func Cache(c *cache.Cache, fresh time.Duration) func(http.Handler) http.Handler {
	m, err := New(c, &Options{Freshness: FreshnessPolicy{Fresh: fresh}})
	if err != nil {
		panic(err)
	}
	return m.Handler
}

// Handler wraps next: GET and HEAD requests are answered from the cache
// when it holds a fresh (or, within its stale window, stale) response, and
// otherwise one request per key in the whole cluster renders while the
// others wait for its response; everything else goes straight to next.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(m.tagHeaders) > 0 && !m.o.Tags.Keep {
			w = &tagStripper{ResponseWriter: w, names: m.tagHeaders}
		}
		purge := m.o.Purge != nil && r.Method == methodPurge
		if !m.observing() {
			if purge {
				m.servePurge(w, r)
			} else {
				m.answer(w, r, next, "")
			}
			return
		}
		start := time.Now()
		route := m.route(r) // before next runs: chi fills its pattern in as it routes
		sw := &statusWriter{ResponseWriter: w}
		var o outcome
		if purge {
			o = m.servePurge(sw, r)
		} else {
			o = m.answer(sw, r, next, route)
		}
		o.status = sw.sent(o.kind)
		m.observe(r.Context(), r.Method, route, time.Since(start), o)
	})
}

// answer answers r, which is no PURGE (see servePurge), from the cache or
// not, and says how.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, next http.Handler, route string) outcome {
	reason := m.bypass(r)
	base, ok := "", false
	if reason == "" {
		if base, ok = m.baseKey(r); !ok {
			reason = "no key for the request"
		}
	}
	asks := httprule.RequestAsks(r.Header)
	if reason != "" && asks.OnlyIfCached && safeMethod(r.Method) {
		return m.notCached(w, "BYPASS", "a bypass with only-if-cached")
	}
	if reason != "" {
		if m.o.NoInvalidation || safeMethod(r.Method) {
			m.pass(w, r, next, bypassStatus(reason))
			return outcome{kind: EventBypass, reason: reason}
		}
		iv := &invalidator{ResponseWriter: w, m: m, r: r}
		m.pass(iv, r, next, bypassStatus(reason))
		iv.decide(http.StatusOK) // the handler wrote nothing: net/http sends 200
		return outcome{kind: EventBypass, reason: reason}
	}
	x := &exchange{w: w, r: r, next: next, route: route, at: place{base: base}, onlyIfCached: asks.OnlyIfCached}
	if !asks.OnlyIfCached && m.o.AllowNoCache && asks.NoCache {
		if ranged(r) {
			// A new render of a range for this client alone: the
			// handler answers it, as without the cache; nothing is
			// stored (a render for the cache is made without Range).
			m.pass(w, r, next, status{x: "BYPASS", fwd: "request", detail: "range"})
			return outcome{kind: EventBypass, reason: "range request with the client's no-cache"}
		}
		return m.renderAndStore(x)
	}
	return m.serve(x)
}

// step is what a step of serve leaves to do.
type step uint8

// serve answers x.r through the cache; see Handler.
func (m *Middleware) serve(x *exchange) outcome {
	w, r, next := x.w, x.r, x.next
	// A look for the Vary this process knows, one more when the base's
	// marker names another Vary or generation, one under the variant's
	// key after a render that made the marker, and one for going back to
	// the key after a revalidation a write overtook (see revalidate).
	looked := false // a look was made in the current generation: GetOrLoad counted r then
	for attempt := 0; attempt < 4; attempt++ {
		x.at = m.placeOf(x.at.base, r)
		key := x.at.key
		p, current := m.find(r.Context(), x.at)
		if !current {
			continue // the index now holds what base's marker says
		}
		if len(p.resp.Tags) > 0 && (p.err == nil || errors.Is(p.err, cache.ErrStale)) {
			switch st, now := m.tagsState(r.Context(), &p.resp); st {
			case tagsPurged:
				// A tag of the page was purged: it is gone, for this
				// request and every other (see tags.go), and one render
				// in the cluster replaces it.
				x.seen = now
				if x.onlyIfCached {
					m.dropPurged(r.Context(), key, &p)
					continue
				}
				if o, again := m.replacePurged(x, key, x.at.vary, &p); !again {
					return o
				}
				m.dropPurged(r.Context(), key, &p) // nothing replaced it: as on a miss
				continue
			case tagsSoft:
				// Soft-purged: stale from now on, for this request and
				// every other (see softpurge.go); its refresh renders
				// knowing the epochs now.
				x.seen = now
				if p.err == nil {
					// The cache still reads it fresh: mark it, and look
					// again (at the marked entry, or what replaced it).
					m.markStale(r.Context(), key, &p)
					continue
				}
			}
		}
		// The cache counts this look only if it answers r on the first
		// look in the current generation: otherwise GetOrLoad counts
		// what it finds, and a later look belongs to a request GetOrLoad
		// has counted already.
		p.counted = looked
		looked = true
		o, s := m.fromStored(x, &p)
		if s == stepOn && x.onlyIfCached {
			o, s = m.fromStoredOnly(x, &p)
		}
		if s == stepOn {
			o, s = m.throughCache(x, &p)
		}
		if s == stepDone {
			return o
		}
		if s == stepStop {
			break
		}
	}
	if x.onlyIfCached {
		return m.notCached(w, "MISS", "only-if-cached")
	}
	m.pass(w, r, next, status{x: "BYPASS", fwd: "vary-miss", detail: "no-variant"})
	return outcome{kind: EventBypass, reason: "no stored variant matches the request"}
}

// fromStoredOnly answers x, which says only-if-cached, with p, what a
// look found that fromStored did not answer with: a stale response,
// when it may be served stale, or a 504.
func (m *Middleware) fromStoredOnly(x *exchange, p *peeked) (outcome, step) {
	if errors.Is(p.err, cache.ErrStale) && p.resp.matches(x.r) && !p.resp.mustRevalidate(m.now()) && !m.waitsSoft(p) {
		if !p.counted {
			p.found.Count()
		}
		m.write(x.w, x.r, &p.resp, statusStale)
		return outcome{kind: EventStale}, stepDone
	}
	return m.notCached(x.w, "MISS", "only-if-cached"), stepDone
}

// notCached answers a request that says only-if-cached, and that no
// stored response answers, with 504 (RFC 9111 5.2.1.7): a response this
// cache makes, which carries the status header (x) but no Cache-Status
// (RFC 9211 2).
func (m *Middleware) notCached(w http.ResponseWriter, x, reason string) outcome {
	h := w.Header()
	if m.statusHeader != "-" {
		h[m.statusHeader] = []string{x}
	}
	h.Set("Content-Length", "0")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusGatewayTimeout)
	return outcome{kind: EventBypass, reason: reason}
}

// fromStored answers x.r from p, what a look under x.at.key found, if it can:
// fresh hits first, without the machinery a render needs. A response
// kept past its stale window is revalidated first.
func (m *Middleware) fromStored(x *exchange, p *peeked) (outcome, step) {
	key, vary := x.at.key, x.at.vary
	cached, r := &p.resp, x.r
	kept := cached.RevalidateFrom != 0 && (errors.Is(p.err, cache.ErrStale) || cached.FreshUntil <= cached.Stored) &&
		cached.mustRevalidate(m.now())
	if (kept || m.waitsSoft(p)) && cached.matches(r) {
		if x.onlyIfCached {
			return m.notCached(x.w, "MISS", "only-if-cached"), stepDone
		}
		// Kept past its stale window, or a no-cache response
		// (RevalidateNoCache, never fresh): never served without a
		// revalidation, which one request in the cluster makes. (Any
		// other value the cache holds as fresh is within its
		// lifetime: the time kept is in the cache's stale window.)
		// A soft-purged response that may not be served stale waits for
		// that revalidation too (see softpurge.go).
		if o, again := m.revalidate(x, key, vary, cached, p.found.Raw); !again {
			return o, stepDone
		}
		return outcome{}, stepAgain
	}
	if p.err == nil && cached.matches(r) {
		if !p.counted {
			p.found.Count()
		}
		m.write(x.w, r, cached, statusHit)
		return outcome{kind: EventHit}, stepDone
	}
	return outcome{}, stepOn
}

// throughCache answers x.r with GetOrLoad of x.at.key, which p, the look before,
// did not answer: r renders the response for the cluster, or waits for
// the render of the request that does, or (p stale) answers with p and
// leaves the refresh to the cache.
func (m *Middleware) throughCache(x *exchange, p *peeked) (outcome, step) {
	key, vary := x.at.key, x.at.vary
	w, r := x.w, x.r
	// A stale response for r: GetOrLoad answers with it and starts a
	// refresh, whose job may reach us before that answer does.
	stale := errors.Is(p.err, cache.ErrStale) && p.resp.matches(r)
	var rv *revalidation
	if stale {
		// The refresh revalidates it (if it has validators); the cache
		// stores the result, or ends it (see toStore).
		rv = &revalidation{prior: &p.resp}
	}
	l := m.look(x, key, vary, rv)
	defer l.cancel()
	if l.job != nil {
		if o, done := m.take(x, l, stale, &p.resp); done {
			return o, stepDone
		}
	}
	if err := r.Context().Err(); err != nil {
		return outcome{kind: EventCanceled, err: err}, stepDone // the client is gone
	}
	if l.res.err != nil {
		// The render failed, could not be stored, or took longer than
		// WaitTimeout: render for this request alone.
		m.pass(w, r, x.next, status{x: "BYPASS", fwd: x.fwd(), detail: "unshared"})
		return unshared(l.res.err), stepDone
	}
	if stale && l.res.resp.Version == p.resp.Version {
		// GetOrLoad answered with the stale response the look found
		// (its refresh runs elsewhere): stale, even if the response's
		// own lifetime has not ended (a soft purge made it stale).
		m.write(w, r, &p.resp, statusStale)
		return outcome{kind: EventStale}, stepDone
	}
	return m.loaded(x, &l.res.resp)
}

// loaded answers x.r with resp, what GetOrLoad of x.at.key returned.
func (m *Middleware) loaded(x *exchange, resp *response) (outcome, step) {
	switch {
	case resp.marker():
		// The base's marker (a render for other header values made
		// it): now that we know what the response varies on, look
		// again under the variant's key.
		m.vary.put(x.at.base, resp.Vary, resp.Version)
		return outcome{}, stepAgain
	case !resp.matches(x.r) && len(x.at.vary) > 0 && !slices.Equal(resp.Vary, x.at.vary):
		// A response whose Vary changed, for other header values: its
		// render moved the page to a new generation (see
		// moveGeneration), where the next look goes.
		return outcome{}, stepAgain
	case !resp.matches(x.r):
		return outcome{}, stepStop
	}
	soft := false // soft-purged since the render began: served stale
	if len(resp.Tags) > 0 {
		switch st, _ := m.tagsState(x.r.Context(), resp); {
		case st == tagsPurged:
			return outcome{}, stepAgain // purged since: the next look drops it (see serve)
		case st == tagsSoft && resp.staleWindow() <= 0:
			// Soft-purged since, and it may not be served stale: the
			// next look finds it stored stale, and waits for its
			// revalidation (see softpurge.go).
			return outcome{}, stepAgain
		case st == tagsSoft:
			// The render this request shared began before a soft purge
			// of one of its tags: it may have read the data from
			// before, so it is stored stale, and served as stale.
			soft = true
		}
	}
	if resp.FreshUntil > resp.Stored && resp.mustRevalidate(m.now()) {
		// GetOrLoad found it kept past its stale window (and served
		// it, as the cache serves what it holds as stale): the next
		// look finds it so, and revalidates it over the entry it reads
		// (see fromStored). A no-cache response (never fresh) is the
		// render this request waited for: it is as new as a
		// revalidation.
		return outcome{}, stepAgain
	}
	// This request did not render: a hit, even when it waited for
	// another request's render.
	if soft || !resp.fresh(m.now()) {
		m.write(x.w, x.r, resp, statusStale)
		return outcome{kind: EventStale}, stepDone
	}
	m.write(x.w, x.r, resp, collapsedStatus(x.fwd()))
	return outcome{kind: EventHit}, stepDone
}

// renderAndStore renders r itself (a client's no-cache) and stores the
// response in place of the one stored for r, if it may be stored and
// the key still holds that one when the render ends: a purge, a write's
// invalidation or another render meanwhile wins (SetIfUnchanged; see
// purgerule.go). With nothing stored for r there is nothing to
// bypass: r is a miss like any other (serve), which renders under the
// cache's claim, or shares the render in flight.
func (m *Middleware) renderAndStore(x *exchange) outcome {
	w, r, next, base := x.w, x.r, x.next, x.at.base
	var p peeked
	for range 2 { // again if the index changed (see find)
		x.at = m.placeOf(base, r)
		var current bool
		if p, current = m.find(r.Context(), x.at); current {
			break
		}
	}
	if p.err != nil && !errors.Is(p.err, cache.ErrStale) || p.found.Raw == nil || p.resp.marker() {
		return m.serve(x)
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

// revalidate answers x, for which prior, stored under key (the variant
// key of x's base for vary) in the entry raw, is kept past its stale
// window or soft-purged: one request in the cluster revalidates it (see
// the comment at the top of this file), the others wait for that render
// and answer with what it stored.
//
// again reports that x is not answered: the revalidation ended without
// leaving a response for r under key (a write deleted it, or another
// render replaced it, meanwhile), and r goes back to the key, where it
// shares the one render (or finds the response) that every other
// request for it, in every process, finds too. Rendering alone there
// would re-open the stampede a write is bound to: at most one render per
// key after it.
//
// The revalidation stores only over raw, the very entry the look read
// before it (see storeRevalidated), and its key names that entry, not
// only prior's version: a soft purge rewrites the entry, keeping the
// version, and a render begun before it may have read the data from
// before. Its result is dropped, and the requests that read the entry
// the soft purge left share a render of their own.
func (m *Middleware) revalidate(x *exchange, key string, vary []string, prior *response, raw []byte) (o outcome, again bool) {
	rkey := key + "\nrevalidate " + strconv.FormatUint(prior.Version, 36) + " " + strconv.FormatUint(xxh3.Hash(raw), 36)
	return m.renderOver(x, rkey, vary, &revalidation{prior: prior, key: key, raw: raw})
}

// replacePurged answers x, whose look under key (for vary) found p, a
// page a purge of one of its tags ended (x.seen holds the epochs of its
// tags' records now): one request in the cluster renders the page again
// and stores it in place of p, only over p's very entry, and every other
// request for it, in every process, waits for that render, as for a
// revalidation, under a key of p's own. The render knows the epochs after
// the purge, so a purge just before it does not keep it out of the cache.
// (Deleting p first, and rendering as on a miss, let a process that then
// found the key empty claim it knowing no epoch: its render, begun within
// ClockSkew of the purge, was not stored, and its waiters waited for a
// second; the bench's page purge scenario found it in a third of its
// runs.) again is revalidate's.
func (m *Middleware) replacePurged(x *exchange, key string, vary []string, p *peeked) (o outcome, again bool) {
	rkey := key + "\npurged " + strconv.FormatUint(xxh3.Hash(p.found.Raw), 36)
	return m.renderOver(x, rkey, vary, &revalidation{prior: &p.resp, key: key, raw: p.found.Raw, purged: true})
}

// renderOver is revalidate and replacePurged: x shares the render, under
// rkey, that replaces rv.prior, stored under rv.key.
func (m *Middleware) renderOver(x *exchange, rkey string, vary []string, rv *revalidation) (o outcome, again bool) {
	w, r, prior := x.w, x.r, rv.prior
	fwd := "stale" // Cache-Status fwd: a stale response was the reason to render
	if rv.purged {
		fwd = x.fwd()
	}
	l := m.look(x, rkey, vary, rv)
	defer l.cancel()
	if l.job != nil {
		if o, done := m.take(x, l, false, nil); done {
			return o, false
		}
	}
	if err := r.Context().Err(); err != nil {
		return outcome{kind: EventCanceled, err: err}, false // the client is gone
	}
	if err := l.res.err; err != nil && !rv.purged && prior.graceful(m.now()) && renderFailed(err) && m.holds(r.Context(), x, prior) {
		// The revalidation failed (here or in another process), or
		// took longer than WaitTimeout, within prior's grace
		// (Freshness.StaleIfError): prior answers.
		m.write(w, r, prior, graceStatus(0))
		return outcome{kind: EventStale, reason: "the revalidation failed; served stale (Freshness.StaleIfError)"}, false
	}
	if err := l.res.err; err != nil {
		// The revalidation failed, or took longer than WaitTimeout:
		// render for this request alone.
		m.pass(w, r, x.next, status{x: "BYPASS", fwd: fwd, detail: "unshared"})
		return unshared(err), false
	}
	// Another request revalidated it: read what it stored. (The cache
	// counted this request once already, as a miss: this look is not
	// counted.)
	cur, _, gerr := engine.Peek[response](r.Context(), m.e, rv.key)
	done := &l.res.resp // the marker of what it stored; Version 0 if nothing
	if (gerr != nil && !errors.Is(gerr, cache.ErrStale)) || !cur.matches(r) ||
		!(gerr == nil && cur.fresh(m.now()) || done.Version != 0 && cur.Version == done.Version) {
		return outcome{}, true
	}
	// Fresh, or the very response the render this request waited for
	// stored (a no-cache one is never fresh): served, unless a tag of it
	// was purged since its render began. Soft-purged since (the render
	// may have read the data from before), it is served as stale, or,
	// when it may not be served stale, the request looks again and
	// waits for its revalidation (see softpurge.go).
	switch st, _ := m.tagsState(r.Context(), &cur); {
	case st == tagsPurged, st == tagsSoft && cur.staleWindow() <= 0:
		return outcome{}, true
	case st == tagsSoft:
		m.write(w, r, &cur, statusStale)
		return outcome{kind: EventStale}, false
	}
	m.write(w, r, &cur, collapsedStatus(fwd))
	return outcome{kind: EventHit}, false
}

const (
	stepOn    step = iota // go on to the next step
	stepDone              // r is answered
	stepAgain             // look again: the index, or the key, changed
	stepStop              // no stored variant matches r: pass it through
)
