package middleware

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/internal/httprule"
)

// Middleware caches HTTP responses in a cache.Cache. It is safe for
// concurrent use. Use New to create a Middleware.
type Middleware struct {
	c            *cache.Cache
	e            engine.View // c's operations for the middleware: looks counted on answering, writes only if unchanged
	o            Options
	now          func() time.Time
	statusHeader string   // canonical, or "-"
	keyHeaders   []string // canonical
	limit        int      // StoreLimit or its default
	maxValue     int      // the cache's MaxValueSize
	wait         time.Duration
	tagHeaders   []string // Tags.Headers, canonical
	tagLife      time.Duration
	tagSkew      time.Duration

	vary varyIndex

	// rules is o's policy for the storage rules (httprule), made by New
	// once o's defaults are set; read-only.
	rules httprule.Policy
}

// New returns a Middleware storing responses in c.
func New(c *cache.Cache, opts *Options) (*Middleware, error) {
	if c == nil {
		return nil, invalid("nil *cache.Cache")
	}
	var o Options
	if opts != nil {
		o = *opts
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{c: c, e: c.Engine(), o: o, now: o.Now, statusHeader: o.StatusHeader, limit: o.StoreLimit, wait: o.WaitTimeout}
	if m.now == nil {
		m.now = time.Now
	}
	if m.statusHeader == "" {
		m.statusHeader = "X-Cache"
	}
	if m.statusHeader != "-" {
		m.statusHeader = http.CanonicalHeaderKey(m.statusHeader)
	}
	m.maxValue = m.e.MaxValueSize()
	limit, err := o.storeLimit(m.maxValue)
	if err != nil {
		return nil, err
	}
	m.limit = limit
	if m.wait == 0 {
		m.wait = 5 * time.Second
	}
	if m.o.Freshness.TTL == 0 {
		m.o.Freshness.TTL = time.Minute
	}
	m.rules = m.o.rules(m.maxValue)
	for _, h := range o.Keys.Headers {
		m.keyHeaders = append(m.keyHeaders, http.CanonicalHeaderKey(h))
	}
	for _, h := range o.Tags.Headers {
		if ch := http.CanonicalHeaderKey(h); !slices.Contains(m.tagHeaders, ch) {
			m.tagHeaders = append(m.tagHeaders, ch)
		}
	}
	m.tagLife, m.tagSkew = o.Tags.Lifetime, o.Tags.ClockSkew
	if m.tagLife == 0 {
		m.tagLife = 24 * time.Hour
	}
	if m.tagSkew == 0 {
		m.tagSkew = time.Second
	}
	return m, nil
}

// Cache returns middleware that caches responses in c for ttl (unless a
// response's Cache-Control says otherwise), for r.Use in chi or to wrap
// any http.Handler. It panics if ttl is invalid.
func Cache(c *cache.Cache, ttl time.Duration) func(http.Handler) http.Handler {
	m, err := New(c, &Options{Freshness: FreshnessPolicy{TTL: ttl}})
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
		if !m.observing() {
			m.answer(w, r, next, "")
			return
		}
		start := time.Now()
		route := m.route(r) // before next runs: chi fills its pattern in as it routes
		sw := &statusWriter{ResponseWriter: w}
		o := m.answer(sw, r, next, route)
		o.status = sw.sent(o.kind)
		m.observe(r.Context(), r.Method, route, time.Since(start), o)
	})
}

// answer answers r, from the cache or not, and says how.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, next http.Handler, route string) outcome {
	if len(m.tagHeaders) > 0 && !m.o.Tags.Keep {
		w = &tagStripper{ResponseWriter: w, names: m.tagHeaders}
	}
	if m.o.Purge != nil && r.Method == methodPurge {
		return m.servePurge(w, r)
	}
	reason := m.bypass(r)
	base, ok := "", false
	if reason == "" {
		if base, ok = m.baseKey(r); !ok {
			reason = "no key for the request"
		}
	}
	onlyIfCached := httprule.OnlyIfCached(r.Header)
	if reason != "" && onlyIfCached && safeMethod(r.Method) {
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
	if onlyIfCached {
		x := &exchange{w: w, r: r, next: next, base: base, route: route, onlyIfCached: true}
		return m.serveExchange(x)
	}
	if m.o.AllowNoCache && httprule.NoCache(r.Header) {
		if ranged(r) {
			// A new render of a range for this client alone: the
			// handler answers it, as without the cache; nothing is
			// stored (a render for the cache is made without Range).
			m.pass(w, r, next, status{x: "BYPASS", fwd: "request", detail: "range"})
			return outcome{kind: EventBypass, reason: "range request with the client's no-cache"}
		}
		return m.renderAndStore(w, r, next, base, route)
	}
	return m.serve(w, r, next, base, route)
}

// place is where a request for base looks, as far as this process
// knows: base's key itself, or, for a response with Vary, the variant's
// key in base's generation gen of the Vary names vary (see vary.go).
type place struct {
	base, key string
	vary      []string
	gen       uint64
}

// placeOf is where a request r for base looks now (see varyIndex).
func (m *Middleware) placeOf(base string, r *http.Request) place {
	vary, gen := m.vary.get(base)
	at := place{base: base, key: base, vary: vary, gen: gen}
	if len(vary) > 0 {
		at.key = variantKey(generationBase(base, gen), vary, r)
	}
	return at
}

// exchange is one request on its way through serve: what each step of
// answering it through the cache needs.
type exchange struct {
	w     http.ResponseWriter
	r     *http.Request
	next  http.Handler
	base  string   // r's base key (see baseKey)
	route string   // r's Event.Route
	seen  []tagRef // the epochs of the tags of a purged page r found, for its render (see registerTags)
	fwd   string   // Cache-Status fwd of a render for r: uri-miss, or vary-miss when its URL has a stored response with Vary

	at place // where the look in progress looks

	// onlyIfCached: r says only-if-cached (RFC 9111 5.2.1.7): it is
	// answered from storage or with a 504, never by a render.
	onlyIfCached bool
}

// step is what a step of serve leaves to do.
type step uint8

const (
	stepOn    step = iota // go on to the next step
	stepDone              // r is answered
	stepAgain             // look again: the index, or the key, changed
	stepStop              // no stored variant matches r: pass it through
)

// serve answers r through the cache; see Handler.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler, base, route string) outcome {
	return m.serveExchange(&exchange{w: w, r: r, next: next, base: base, route: route})
}

// serveExchange answers x.r through the cache; see Handler.
func (m *Middleware) serveExchange(x *exchange) outcome {
	w, r, next := x.w, x.r, x.next
	// A look for the Vary this process knows, one more when the base's
	// marker names another Vary or generation, one under the variant's
	// key after a render that made the marker, and one for going back to
	// the key after a revalidation a write overtook (see revalidate).
	looked := false // a look was made in the current generation: GetOrLoad counted r then
	for attempt := 0; attempt < 4; attempt++ {
		x.at = m.placeOf(x.base, r)
		key, vary := x.at.key, x.at.vary
		x.fwd = "uri-miss"
		if len(vary) > 0 {
			x.fwd = "vary-miss"
		}
		p, current := m.find(r.Context(), x.at)
		if !current {
			continue // the index now holds what base's marker says
		}
		if len(p.resp.Tags) > 0 && (p.err == nil || errors.Is(p.err, cache.ErrStale)) {
			if live, now := m.tagsLive(r.Context(), &p.resp); !live {
				// A tag of the page was purged: it is gone, for this
				// request and every other (see tags.go).
				m.dropPurged(r.Context(), key, &p)
				x.seen = now
				continue
			}
		}
		// The cache counts this look only if it answers r on the first
		// look in the current generation: otherwise GetOrLoad counts
		// what it finds, and a later look belongs to a request GetOrLoad
		// has counted already.
		p.counted = looked
		looked = true
		o, s := m.fromStored(x, key, vary, &p)
		if s == stepOn && x.onlyIfCached {
			o, s = m.fromStoredOnly(x, &p)
		}
		if s == stepOn {
			o, s = m.throughCache(x, key, vary, &p)
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
	if errors.Is(p.err, cache.ErrStale) && p.resp.matches(x.r) && !p.resp.mustRevalidate(m.now()) {
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

// fromStored answers r from p, what a look under key found, if it can:
// fresh hits first, without the machinery a render needs. A response
// kept past its stale window is revalidated first.
func (m *Middleware) fromStored(x *exchange, key string, vary []string, p *peeked) (outcome, step) {
	cached, r := &p.resp, x.r
	if cached.RevalidateFrom != 0 && (errors.Is(p.err, cache.ErrStale) || cached.FreshUntil <= cached.Stored) &&
		cached.matches(r) && cached.mustRevalidate(m.now()) {
		if x.onlyIfCached {
			return m.notCached(x.w, "MISS", "only-if-cached"), stepDone
		}
		// Kept past its stale window, or a no-cache response
		// (RevalidateNoCache, never fresh): never served without a
		// revalidation, which one request in the cluster makes. (Any
		// other value the cache holds as fresh is within its
		// lifetime: the time kept is in the cache's stale window.)
		if o, again := m.revalidate(x, key, vary, cached); !again {
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

// throughCache answers r with GetOrLoad of key, which p, the look before,
// did not answer: r renders the response for the cluster, or waits for
// the render of the request that does, or (p stale) answers with p and
// leaves the refresh to the cache.
func (m *Middleware) throughCache(x *exchange, key string, vary []string, p *peeked) (outcome, step) {
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
		m.pass(w, r, x.next, status{x: "BYPASS", fwd: x.fwd, detail: "unshared"})
		return unshared(l.res.err), stepDone
	}
	return m.loaded(x, key, &l.res.resp)
}

// loaded answers r with resp, what GetOrLoad of key returned.
func (m *Middleware) loaded(x *exchange, key string, resp *response) (outcome, step) {
	switch {
	case resp.marker():
		// The base's marker (a render for other header values made
		// it): now that we know what the response varies on, look
		// again under the variant's key.
		m.vary.put(x.base, resp.Vary, resp.Version)
		return outcome{}, stepAgain
	case !resp.matches(x.r) && len(x.at.vary) > 0 && !slices.Equal(resp.Vary, x.at.vary):
		// A response whose Vary changed, for other header values: its
		// render moved the page to a new generation (see
		// moveGeneration), where the next look goes.
		return outcome{}, stepAgain
	case !resp.matches(x.r):
		return outcome{}, stepStop
	case len(resp.Tags) > 0:
		if !m.live(x.r.Context(), resp) {
			return outcome{}, stepAgain // purged since: the next look drops it (see serve)
		}
	}
	if resp.FreshUntil > resp.Stored && resp.mustRevalidate(m.now()) {
		// GetOrLoad found it kept past its stale window (and served
		// it, as the cache serves what it holds as stale). A no-cache
		// response (never fresh) is the render this request waited
		// for: it is as new as a revalidation.
		if o, again := m.revalidate(x, key, resp.Vary, resp); !again {
			return o, stepDone
		}
		return outcome{}, stepAgain
	}
	// This request did not render: a hit, even when it waited for
	// another request's render.
	if !resp.fresh(m.now()) {
		m.write(x.w, x.r, resp, statusStale)
		return outcome{kind: EventStale}, stepDone
	}
	m.write(x.w, x.r, resp, collapsedStatus(x.fwd))
	return outcome{kind: EventHit}, stepDone
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

// peeked is what a look under a key found (see find).
type peeked struct {
	resp    response
	err     error        // the cache's answer: nil, cache.ErrStale with resp, or why there is no resp
	found   engine.Found // counts the look in the cache's Stats, once r is answered from it
	counted bool         // GetOrLoad counted r already: the look must not count again
}

// find reads key, r's key for base with the Vary names vary of the
// generation gen (base itself when vary is empty), and, with vary, base's
// marker alongside it (see generationBase): in parallel, so a variant's
// hit waits for no more round trips than a plain one (with the near
// cache on, both are answered in the process). Neither read counts in
// the cache's Stats (see engine.View.Peek): key's does through
// peeked.found, once it answers r; the marker's never does.
//
// current is false when what r looked under is not the base's current
// generation: the marker names other Vary names or another generation,
// or there is none (a write deleted it, or it expired) for a variant; or
// key is base and holds a marker. The index then holds what the marker
// says (nothing, without one), and r looks again. A failed read of the
// marker leaves the index as it is.
func (m *Middleware) find(ctx context.Context, at place) (p peeked, current bool) {
	base, key, vary, gen := at.base, at.key, at.vary, at.gen
	if len(vary) == 0 {
		p.resp, p.found, p.err = engine.Peek[response](ctx, m.e, key)
		if (p.err == nil || errors.Is(p.err, cache.ErrStale)) && p.resp.marker() {
			m.vary.put(base, p.resp.Vary, p.resp.Version)
			return p, false
		}
		return p, true
	}
	type read struct {
		mk  response
		err error
	}
	marker := make(chan read, 1)
	go func() {
		mk, _, err := engine.Peek[response](ctx, m.e, base)
		marker <- read{mk, err}
	}()
	p.resp, p.found, p.err = engine.Peek[response](ctx, m.e, key)
	mr := <-marker
	switch {
	case mr.err == nil, errors.Is(mr.err, cache.ErrStale), errors.Is(mr.err, cache.ErrMiss):
	default:
		// The server failed to answer for the marker: what the index
		// says stands for this request (a write's Delete of the marker
		// fails as well), as the variant's read has failed or not.
		return p, true
	}
	if !mr.mk.marker() {
		m.vary.put(base, nil, 0)
		return p, false
	}
	if mr.mk.Version != gen || !slices.Equal(mr.mk.Vary, vary) {
		m.vary.put(base, mr.mk.Vary, mr.mk.Version)
		return p, false
	}
	return p, true
}
