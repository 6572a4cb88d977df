package middleware

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"time"

	"github.com/hotkv/stampede/cache"
)

// Middleware caches HTTP responses in a cache.Cache. It is safe for
// concurrent use. Use New to create a Middleware.
type Middleware struct {
	c            *cache.Cache
	o            Options
	now          func() time.Time
	statusHeader string
	keyHeaders   []string // canonical
	limit        int      // StoreLimit or its default
	maxValue     int      // the cache's MaxValueSize
	wait         time.Duration

	vary varyIndex
}

// New returns a Middleware storing responses in c.
func New(c *cache.Cache, opts *Options) (*Middleware, error) {
	if c == nil {
		return nil, errors.New("middleware: nil *cache.Cache")
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
		if reason := m.bypass(r); reason != "" {
			m.setStatus(w.Header(), statusBypass)
			next.ServeHTTP(w, r)
			return
		}
		base, ok := m.baseKey(r)
		if !ok {
			m.setStatus(w.Header(), statusBypass)
			next.ServeHTTP(w, r)
			return
		}
		if m.o.AllowNoCache && clientNoCache(r) {
			m.renderAndStore(w, r, next, base)
			return
		}
		m.serve(w, r, next, base)
	})
}

// serve answers r through the cache; see Handler.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler, base string) {
	for attempt := 0; attempt < 2; attempt++ {
		vary := m.vary.get(base)
		key := variantKey(base, vary, r)

		// Fresh hits first, without the machinery a render needs.
		cached, err := cache.Get[response](r.Context(), m.c, key)
		if err == nil && cached.matches(r) {
			m.write(w, r, &cached, statusHit)
			return
		}
		// A stale response for r: GetOrLoad answers with it and starts a
		// refresh, whose job may reach us before that answer does.
		stale := errors.Is(err, cache.ErrStale) && cached.matches(r)

		h := newHandoff()
		results := make(chan result, 1)
		ctx := r.Context()
		// WaitTimeout bounds the wait for a render in this process too
		// (the cache's own limit is for other processes). The loader may
		// render in the background after this request has ended: give it
		// routing state of its own (see detachRoute).
		gctx, cancel := context.WithTimeout(detachRoute(ctx), m.wait)
		defer cancel()
		go func() {
			resp, err := cache.GetOrLoad(gctx, m.c, key, h.loader(m, next, r), cache.WithWaitTimeout(m.wait))
			results <- result{resp: resp, err: err}
		}()

		var (
			res result
			got bool // res holds what GetOrLoad returned
			j   *job
		)
		select {
		case j = <-h.jobs:
		case res = <-results:
			got = true
		case <-ctx.Done():
		}
		if !got { // select picks at random when both are ready
			select {
			case res = <-results:
				got = true
			default:
			}
		}
		if sent := h.close(); sent != nil {
			j = sent
		}
		if j != nil {
			switch {
			case ctx.Err() != nil:
				// The client went before taking the render: the loader
				// does it in the background, for the waiters and the
				// cache, as it does when it asks after the client went.
				j.done <- result{err: errDeclined}
				return
			case got && res.err == nil, stale:
				// GetOrLoad answers (or, having found the stale response,
				// will answer) without our render: the job is the refresh
				// it started, which the loader does in the background.
				j.done <- result{err: errDeclined}
				if !got {
					m.write(w, r, &cached, statusStale)
					return
				}
			default:
				// Our loader was chosen to render this response.
				m.vary.put(base, m.renderFor(w, r, next, j).resp.Vary)
				return
			}
		}
		if ctx.Err() != nil {
			return // the client is gone
		}
		if res.err != nil {
			// The render failed, could not be stored, or took longer than
			// WaitTimeout: render for this request alone.
			m.setStatus(w.Header(), statusBypass)
			next.ServeHTTP(w, r)
			return
		}
		resp := &res.resp
		if !slices.Equal(resp.Vary, vary) {
			m.vary.put(base, resp.Vary)
		}
		if !resp.matches(r) {
			// A variant for other header values: now that we know what
			// the response varies on, look again under the variant's key.
			if slices.Equal(resp.Vary, vary) {
				break
			}
			continue
		}
		// This request did not render: a hit, even when it waited for
		// another request's render.
		status := statusHit
		if !resp.fresh(m.now()) {
			status = statusStale
		}
		m.write(w, r, resp, status)
		return
	}
	m.setStatus(w.Header(), statusBypass)
	next.ServeHTTP(w, r)
}

// result is what a render or a cache lookup produced.
type result struct {
	resp  response
	err   error
	stale time.Duration // the stale window the response asked for
}
