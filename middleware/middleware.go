package middleware

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/peek"
)

// Middleware caches HTTP responses in a cache.Cache. It is safe for
// concurrent use. Use New to create a Middleware.
type Middleware struct {
	c            *cache.Cache
	o            Options
	now          func() time.Time
	statusHeader string   // canonical, or "-"
	keyHeaders   []string // canonical
	limit        int      // StoreLimit or its default
	maxValue     int      // the cache's MaxValueSize
	wait         time.Duration

	vary varyIndex
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
	m := &Middleware{c: c, o: o, now: o.Now, statusHeader: o.StatusHeader, limit: o.StoreLimit, wait: o.WaitTimeout}
	if m.now == nil {
		m.now = time.Now
	}
	if m.statusHeader == "" {
		m.statusHeader = "X-Cache"
	}
	if m.statusHeader != "-" {
		m.statusHeader = http.CanonicalHeaderKey(m.statusHeader)
	}
	m.maxValue = c.MaxValueSize()
	limit, err := o.storeLimit(m.maxValue)
	if err != nil {
		return nil, err
	}
	m.limit = limit
	if m.wait == 0 {
		m.wait = 5 * time.Second
	}
	if m.o.TTL == 0 {
		m.o.TTL = time.Minute
	}
	for _, h := range o.KeyHeaders {
		m.keyHeaders = append(m.keyHeaders, http.CanonicalHeaderKey(h))
	}
	return m, nil
}

// Cache returns middleware that caches responses in c for ttl (unless a
// response's Cache-Control says otherwise), for r.Use in chi or to wrap
// any http.Handler. It panics if ttl is invalid.
func Cache(c *cache.Cache, ttl time.Duration) func(http.Handler) http.Handler {
	m, err := New(c, &Options{TTL: ttl})
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
		o := m.answer(w, r, next, route)
		m.observe(route, time.Since(start), o)
	})
}

// answer answers r, from the cache or not, and says how.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, next http.Handler, route string) outcome {
	reason := m.bypass(r)
	base, ok := "", false
	if reason == "" {
		if base, ok = m.baseKey(r); !ok {
			reason = "no key for the request"
		}
	}
	if reason != "" {
		m.setStatus(w.Header(), statusBypass)
		if m.o.NoInvalidation || safeMethod(r.Method) {
			next.ServeHTTP(w, r)
			return outcome{kind: EventBypass, reason: reason}
		}
		iv := &invalidator{ResponseWriter: w, m: m, r: r}
		next.ServeHTTP(iv, r)
		iv.decide(http.StatusOK) // the handler wrote nothing: net/http sends 200
		return outcome{kind: EventBypass, reason: reason}
	}
	if m.o.AllowNoCache && clientNoCache(r) {
		if ranged(r) {
			// A new render of a range for this client alone: the
			// handler answers it, as without the cache; nothing is
			// stored (a render for the cache is made without Range).
			m.setStatus(w.Header(), statusBypass)
			next.ServeHTTP(w, r)
			return outcome{kind: EventBypass, reason: "range request with the client's no-cache"}
		}
		return m.renderAndStore(w, r, next, base)
	}
	return m.serve(w, r, next, base, route)
}

// serve answers r through the cache; see Handler.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler, base, route string) outcome {
	// A look for the Vary this process knows, one more when the base's
	// marker names another Vary or generation, one under the variant's
	// key after a render that made the marker, and one for going back to
	// the key after a revalidation a write overtook (see revalidate).
	looked := false // a look was made in the current generation: GetOrLoad counted r then
	for attempt := 0; attempt < 4; attempt++ {
		vary, gen := m.vary.get(base)
		key := variantKey(generationBase(base, gen), vary, r)
		if len(vary) == 0 {
			key = base
		}

		// Fresh hits first, without the machinery a render needs. The
		// cache counts this look only if it answers r on the first look
		// in the current generation: otherwise GetOrLoad counts what it
		// finds (see peek), and a later look belongs to a request
		// GetOrLoad has counted already.
		probe := new(peek.Probe)
		cached, err, current := m.find(r.Context(), probe, base, key, vary, gen)
		if !current {
			continue // the index now holds what base's marker says
		}
		counted := looked
		looked = true
		if cached.RevalidateFrom != 0 && (errors.Is(err, cache.ErrStale) || cached.FreshUntil <= cached.Stored) &&
			cached.matches(r) && cached.mustRevalidate(m.now()) {
			// Kept past its stale window, or a no-cache response
			// (RevalidateNoCache, never fresh): never served without a
			// revalidation, which one request in the cluster makes. (Any
			// other value the cache holds as fresh is within its
			// lifetime: the time kept is in the cache's stale window.)
			o, again := m.revalidate(w, r, next, base, key, vary, route, &cached)
			if !again {
				return o
			}
			continue
		}
		if err == nil && cached.matches(r) {
			if !counted {
				probe.Count()
			}
			m.write(w, r, &cached, statusHit)
			return outcome{kind: EventHit}
		}
		// A stale response for r: GetOrLoad answers with it and starts a
		// refresh, whose job may reach us before that answer does.
		stale := errors.Is(err, cache.ErrStale) && cached.matches(r)
		var rv *revalidation
		if stale {
			// The refresh revalidates it (if it has validators); the cache
			// stores the result, or ends it (see toStore).
			rv = &revalidation{prior: &cached}
		}

		l := m.look(r, next, key, base, vary, route, rv)
		defer l.cancel()
		if l.job != nil {
			if o, done := m.take(w, r, next, base, l, stale, &cached); done {
				return o
			}
		}
		if err := r.Context().Err(); err != nil {
			return outcome{kind: EventCanceled, err: err} // the client is gone
		}
		if l.res.err != nil {
			// The render failed, could not be stored, or took longer than
			// WaitTimeout: render for this request alone.
			m.setStatus(w.Header(), statusBypass)
			next.ServeHTTP(w, r)
			return unshared(l.res.err)
		}
		resp := &l.res.resp
		if resp.marker() {
			// The base's marker (a render for other header values made
			// it): now that we know what the response varies on, look
			// again under the variant's key.
			m.vary.put(base, resp.Vary, resp.Version)
			continue
		}
		if !resp.matches(r) {
			break // a response whose Vary changed, for other header values
		}
		if resp.FreshUntil > resp.Stored && resp.mustRevalidate(m.now()) {
			// GetOrLoad found it kept past its stale window (and served
			// it, as the cache serves what it holds as stale). A no-cache
			// response (never fresh) is the render this request waited
			// for: it is as new as a revalidation.
			o, again := m.revalidate(w, r, next, base, key, resp.Vary, route, resp)
			if !again {
				return o
			}
			continue
		}
		// This request did not render: a hit, even when it waited for
		// another request's render.
		if !resp.fresh(m.now()) {
			m.write(w, r, resp, statusStale)
			return outcome{kind: EventStale}
		}
		m.write(w, r, resp, statusHit)
		return outcome{kind: EventHit}
	}
	m.setStatus(w.Header(), statusBypass)
	next.ServeHTTP(w, r)
	return outcome{kind: EventBypass, reason: "no stored variant matches the request"}
}

// result is what a render or a cache lookup produced.
type result struct {
	resp      response
	err       error
	fresh     time.Duration // how long the response stays fresh, from when it was rendered
	stale     time.Duration // the stale window the response asked for
	notStored bool          // rendered for the cache, which did not write it (renderFor)
}

// find reads key, r's key for base with the Vary names vary of the
// generation gen (base itself when vary is empty), and, with vary, base's
// marker alongside it (see generationBase): in parallel, so a variant's
// hit waits for no more round trips than a plain one (with the near
// cache on, both are answered in the process). The marker's read is not
// counted in Stats; probe is key's (see peek).
//
// current is false when what r looked under is not the base's current
// generation: the marker names other Vary names or another generation,
// or there is none (a write deleted it, or it expired) for a variant; or
// key is base and holds a marker. The index then holds what the marker
// says (nothing, without one), and r looks again. A failed read of the
// marker leaves the index as it is.
func (m *Middleware) find(ctx context.Context, probe *peek.Probe, base, key string, vary []string, gen uint64) (cached response, err error, current bool) {
	if len(vary) == 0 {
		cached, err = cache.Get[response](peek.With(ctx, probe), m.c, key)
		if (err == nil || errors.Is(err, cache.ErrStale)) && cached.marker() {
			m.vary.put(base, cached.Vary, cached.Version)
			return cached, err, false
		}
		return cached, err, true
	}
	type read struct {
		mk  response
		err error
	}
	marker := make(chan read, 1)
	go func() {
		mk, err := cache.Get[response](peek.With(ctx, new(peek.Probe)), m.c, base)
		marker <- read{mk, err}
	}()
	cached, err = cache.Get[response](peek.With(ctx, probe), m.c, key)
	mr := <-marker
	switch {
	case mr.err == nil, errors.Is(mr.err, cache.ErrStale), errors.Is(mr.err, cache.ErrMiss):
	default:
		// The server failed to answer for the marker: what the index
		// says stands for this request (a write's Delete of the marker
		// fails as well), as the variant's read has failed or not.
		return cached, err, true
	}
	if !mr.mk.marker() {
		m.vary.put(base, nil, 0)
		return cached, err, false
	}
	if mr.mk.Version != gen || !slices.Equal(mr.mk.Vary, vary) {
		m.vary.put(base, mr.mk.Vary, mr.mk.Version)
		return cached, err, false
	}
	return cached, err, true
}
