package middleware

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// bypass says why r must not use the cache, or "".
func (m *Middleware) bypass(r *http.Request) string {
	switch {
	case r.Method != http.MethodGet && r.Method != http.MethodHead:
		return "method"
	case r.Header.Get("Authorization") != "":
		return "authorization"
	case r.Header.Get("Cookie") != "" && !m.o.CacheRequestsWithCookies:
		return "cookie"
	case r.Header.Get("Range") != "", r.Header.Get("Upgrade") != "":
		return "range or upgrade"
	case r.ContentLength != 0 || len(r.TransferEncoding) > 0:
		// A body is no part of the key, and the render for the cache gets
		// none (see prepareRender); a GET or HEAD that sends one is served
		// by next as it is, with its body, and shares nothing.
		return "request body"
	case r.URL.Opaque != "" || r.URL.User != nil:
		// "GET http:x" and user information: see baseKey.
		return "opaque or user-info target"
	case strings.Contains(strings.ToLower(strings.Join(r.Header.Values("Cache-Control"), ",")), "no-store"):
		return "no-store"
	}
	return ""
}

func clientNoCache(r *http.Request) bool {
	cc := parseCacheControl(r.Header.Values("Cache-Control"))
	return cc.noCache || strings.EqualFold(r.Header.Get("Pragma"), "no-cache")
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

// renderAndStore renders r itself (a client's no-cache) and stores the
// response if it may be stored.
func (m *Middleware) renderAndStore(w http.ResponseWriter, r *http.Request, next http.Handler, base string) {
	// Nobody waits for this render: it lives and dies with its client.
	j := &job{ctx: r.Context(), done: make(chan result, 1)}
	res := m.renderFor(w, r, next, j)
	if res.err != nil {
		return
	}
	m.vary.put(base, res.resp.Vary)
	key := variantKey(base, res.resp.Vary, r)
	fresh := time.Duration(res.resp.FreshUntil-res.resp.Stored) * time.Millisecond
	_ = cache.Set(r.Context(), m.c, key, res.resp, cache.WithTTL(max(fresh, time.Millisecond)), cache.WithStaleTTL(res.stale))
}

// result is what a render or a cache lookup produced.
type result struct {
	resp  response
	err   error
	stale time.Duration // the stale window the response asked for
}

// errNotStored is the loader's error for a response that must not be
// stored or shared; every other waiter renders for itself.
type errNotStored struct{ reason string }

func (e errNotStored) Error() string { return "middleware: response not stored: " + e.reason }

// errDeclined is a request's answer to a job it will not render: the
// loader renders in the background instead.
var errDeclined = errors.New("middleware: render in the background")

// job is a render requested by the cache's loader from the request's own
// goroutine. ctx is the loader's: detached from every client and ended by
// the cache's LoadTimeout; for a client's no-cache render, which nobody
// else waits for, it is the request's own. The render takes its values
// from the request's context, not from ctx (see renderContext).
type job struct {
	ctx  context.Context
	done chan result
}

// handoff lets the loader of one request's GetOrLoad call have the render
// done by that request's goroutine (which can stream to its client and
// whose panics reach net/http) while it waits, or do it itself in the
// background once the request is gone or has been answered otherwise (a
// stale refresh).
type handoff struct {
	mu      sync.Mutex
	waiting bool // the request still waits and can take a job
	jobs    chan *job
}

func newHandoff() *handoff { return &handoff{waiting: true, jobs: make(chan *job, 1)} }

// close stops the request taking jobs and returns one sent meanwhile.
func (h *handoff) close() *job {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waiting = false
	select {
	case j := <-h.jobs:
		return j
	default:
		return nil
	}
}

func (h *handoff) loader(m *Middleware, next http.Handler, r *http.Request) func(context.Context) (response, error) {
	return func(ctx context.Context) (response, error) {
		h.mu.Lock()
		var j *job
		if h.waiting {
			h.waiting = false
			j = &job{ctx: ctx, done: make(chan result, 1)}
			h.jobs <- j
		}
		h.mu.Unlock()
		if j != nil {
			select {
			case res := <-j.done:
				if !errors.Is(res.err, errDeclined) {
					if res.err == nil {
						cache.Expire(ctx, time.Duration(res.resp.FreshUntil-res.resp.Stored)*time.Millisecond, res.stale)
					}
					return res.resp, res.err
				}
			case <-ctx.Done():
				return response{}, ctx.Err()
			}
		}
		// In the background, on the load's context (the request's values
		// with a copy of its chi routing context, see detachRoute), and
		// within the request's own deadline, as a render in the request's
		// goroutine would be (see renderContext).
		if d, ok := r.Context().Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d)
			defer cancel()
		}
		res := m.render(nil, r.Clone(ctx), next)
		if res.err == nil {
			cache.Expire(ctx, time.Duration(res.resp.FreshUntil-res.resp.Stored)*time.Millisecond, res.stale)
		}
		return res.resp, res.err
	}
}

// renderFor renders r in its own goroutine for job j, answering the
// client as it goes (or streaming, for what cannot be stored), and hands
// the result to j.
//
// The render is shared: it runs on renderContext(r's, j's), so a client
// that goes away does not end it. It goes on (writes to the gone client
// are discarded), is stored and answers the waiters, unless j's context
// ends too or r's deadline passes.
func (m *Middleware) renderFor(w http.ResponseWriter, r *http.Request, next http.Handler, j *job) result {
	delivered := false
	ctx, stop := renderContext(r.Context(), j.ctx)
	defer func() {
		stop()
		if !delivered {
			j.done <- result{err: errNotStored{"the handler panicked"}}
		}
	}()
	res := m.render(w, r.WithContext(ctx), next)
	if res.err == nil && j.ctx.Err() != nil {
		// The load timed out (its waiters have been told) while the client
		// kept waiting: this response is the client's alone.
		res.err = errNotStored{"the render outlasted the load timeout"}
		j.done <- result{err: res.err}
		delivered = true
		m.write(w, r, &res.resp, statusBypass)
		return res
	}
	j.done <- res
	delivered = true
	if res.err == nil {
		m.write(w, r, &res.resp, statusMiss)
	} // else it was passed through to w already
	return res
}

// renderContext returns the context for a render that both the request's
// client (client) and the cache's load (load) may be waiting for. It has
// client's values (its own chi routing context too: the render runs in
// the request's goroutine, before the request ends, so outer middlewares
// see the route it took) and client's deadline, if it has one: an
// application's own limit for the request (http.TimeoutHandler, chi's
// middleware.Timeout, a context.WithTimeout) ends the render at that
// deadline, shared or not, and the handler sees it as ctx.Deadline.
// Otherwise it ends only when both have ended: a client that goes away
// (its context cancelled before its deadline) does not end the render
// the waiters share, which then ends with the load (LoadTimeout); a
// client still connected when LoadTimeout ends the load keeps its own
// render going, as it would without the cache. Once the render passes
// its response through to the client (it flushed, or outgrew StoreLimit:
// see giveToClient), nobody else can use it and it ends with its client.
// stop releases what the context holds; call it once the render is over.
func renderContext(client, load context.Context) (ctx context.Context, stop func()) {
	sr := &sharedRender{client: client}
	ctx = context.WithValue(context.WithoutCancel(client), sharedRenderKey, sr)
	stopDeadline := context.CancelFunc(func() {})
	if d, ok := client.Deadline(); ok {
		ctx, stopDeadline = context.WithDeadline(ctx, d)
	}
	ctx, sr.cancel = context.WithCancelCause(ctx)
	// Each ends the render if the other has ended already; Err is set
	// before AfterFunc runs, so whichever ends last sees the other's.
	stopClient := context.AfterFunc(client, func() {
		// A deadline (DeadlineExceeded) is not the client going: ctx
		// carries it and ends at it by itself, with ctx.Err() saying so.
		switch {
		case load.Err() != nil:
			sr.cancel(context.Cause(load))
		case sr.clientOnly.Load():
			sr.cancel(context.Cause(client))
		}
	})
	stopLoad := context.AfterFunc(load, func() {
		if client.Err() != nil {
			sr.cancel(context.Cause(load))
		}
	})
	return ctx, func() {
		stopClient()
		stopLoad()
		sr.cancel(context.Canceled)
		stopDeadline()
	}
}

// sharedRender is what giveToClient needs of a renderContext.
type sharedRender struct {
	client     context.Context
	cancel     context.CancelCauseFunc
	clientOnly atomic.Bool // set by giveToClient
}

type ctxKey struct{ name string }

var sharedRenderKey = &ctxKey{"shared-render"}

// giveToClient makes the render running on ctx, if it runs on a
// renderContext, end with its client from now on (at once if the client
// has gone): its response is passed through to that client and stored
// for nobody, so nobody else waits for it. A streaming handler (one that
// flushes) thus stops when its client goes, as without the cache.
func giveToClient(ctx context.Context) {
	sr, _ := ctx.Value(sharedRenderKey).(*sharedRender)
	if sr == nil {
		return
	}
	// Either the client's AfterFunc sees clientOnly, or this sees the
	// client's Err: it is set before that AfterFunc runs.
	sr.clientOnly.Store(true)
	if sr.client.Err() != nil {
		sr.cancel(context.Cause(sr.client))
	}
}

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
	stored := m.now()
	next.ServeHTTP(rec, rr)
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	reason, fresh, stale := m.storable(r, rec)
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
	return result{
		resp: response{
			Status: rec.status, Header: storedHeader(rec.header, body), Body: body,
			Stored: stored.UnixMilli(), FreshUntil: stored.Add(fresh).UnixMilli(),
			Vary: vary, VaryValues: values,
		},
		stale: stale,
	}
}

// storable applies the rules of a shared cache (RFC 9111 section 3) and
// the options to a recorded response. It returns why it may not be
// stored, or its fresh and stale durations.
//
// It first merges header fields the handler set in another letter case
// than the canonical one (w.Header()["set-cookie"]) into rec's canonical
// names, so that these rules and the header drops of storedHeader see
// them.
func (m *Middleware) storable(r *http.Request, rec *recorder) (reason string, fresh, stale time.Duration) {
	canonicalHeader(rec.header)
	h := rec.header
	cc := parseCacheControl(h.Values("Cache-Control"))
	_, star := parseVary(h)
	switch {
	case rec.status >= 500 && rec.status != http.StatusNotImplemented:
		return "server error", 0, 0
	case rec.status == http.StatusNotModified || rec.status == http.StatusPreconditionFailed:
		// Answers to this request's conditions, not a response that other
		// requests (without them) may be given.
		return fmt.Sprintf("status %d answers the request's conditions", rec.status), 0, 0
	case m.o.ShouldCache != nil && !m.o.ShouldCache(rec.status, h):
		return "ShouldCache said no", 0, 0
	case m.o.ShouldCache == nil && !m.o.statusOK(rec.status):
		return fmt.Sprintf("status %d", rec.status), 0, 0
	case cc.noStore:
		return "no-store", 0, 0
	case cc.private:
		return "private", 0, 0
	case cc.noCache:
		return "no-cache (would need revalidation)", 0, 0
	case len(h.Values("Set-Cookie")) > 0:
		return "sets a cookie", 0, 0
	case hasTrailers(h):
		// Trailers are sent after the body, where none of these rules
		// would see them (a "Trailer:Set-Cookie" is a cookie too).
		return "declares or sets trailers", 0, 0
	case star:
		return "Vary: *", 0, 0
	case cc.broken:
		return "malformed Cache-Control", 0, 0
	case h["Cache-Control"] == nil && pragmaNoCache(h.Values("Pragma")):
		// HTTP/1.0 origins say Cache-Control: no-cache this way. RFC
		// 9111 5.4 leaves Pragma in responses undefined; where there is
		// no Cache-Control to say otherwise, take it at its word.
		return "Pragma: no-cache", 0, 0
	case storedSize(r, rec) > m.maxValue:
		return "larger than the cache's MaxValueSize", 0, 0
	}
	fresh = m.o.TTL
	switch {
	case cc.hasSMaxAge:
		fresh = cc.sMaxAge
	case cc.hasMaxAge:
		fresh = cc.maxAge
	case h["Expires"] != nil:
		// RFC 9111 4.2.1, 5.3: Expires counts only without s-maxage and
		// max-age; an invalid one means already expired.
		if fresh = expiresIn(h, m.now()); fresh <= 0 {
			return "Expires is not in the future", 0, 0
		}
	}
	if fresh <= 0 {
		return "max-age=0", 0, 0
	}
	stale = m.o.StaleTTL
	if cc.staleWhileRevalidate > 0 || cc.staleIfError > 0 {
		stale = max(cc.staleWhileRevalidate, cc.staleIfError)
	}
	if cc.mustRevalidate || cc.proxyRevalidate {
		stale = 0
	}
	// The entry lives fresh+stale: keep that from overflowing when the
	// options are set huge to mean "forever".
	stale = min(stale, math.MaxInt64-fresh)
	return "", fresh, stale
}

// hasTrailers reports whether a response header declares trailers
// (Trailer) or sets one the way net/http allows without declaring it (a
// name with http.TrailerPrefix, in any letter case).
func hasTrailers(h http.Header) bool {
	if len(h["Trailer"]) > 0 {
		return true
	}
	for k := range h {
		if len(k) >= len(http.TrailerPrefix) && strings.EqualFold(k[:len(http.TrailerPrefix)], http.TrailerPrefix) {
			return true
		}
	}
	return false
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// varyIndex remembers, per base key, the header names responses vary on,
// so requests go straight to their variant's key. It is bounded: when
// full it forgets everything, which costs one extra lookup per resource.
// Entries are keyed by the SHA-256 of the base key, so the index holds
// at most varyIndexMax times 32 bytes of keys however long the base keys
// (up to a whole request target and header values) are.
type varyIndex struct {
	mu    sync.Mutex
	names map[[sha256.Size]byte][]string
}

const varyIndexMax = 10000

func (v *varyIndex) get(base string) []string {
	k := sha256.Sum256([]byte(base))
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.names[k]
}

func (v *varyIndex) put(base string, names []string) {
	k := sha256.Sum256([]byte(base))
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(names) == 0 {
		delete(v.names, k)
		return
	}
	if v.names == nil || len(v.names) >= varyIndexMax {
		v.names = make(map[[sha256.Size]byte][]string)
	}
	v.names[k] = names
}
