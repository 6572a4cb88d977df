package middleware

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/engine"
	"github.com/hotkv/stampede/loader"
)

// handoff lets the loader of one request's GetOrLoad call have the render
// done by that request's goroutine (which can stream to its client and
// whose panics reach net/http) while it waits, or do it itself in the
// background once the request is gone or has been answered otherwise (a
// stale refresh).
type handoff struct {
	mu      sync.Mutex
	waiting bool // the request still waits and can take a job
	jobs    chan *job
	// stored gets true when the cache has written the load of this
	// request's GetOrLoad (engine.View.OnStored), false when that call returned
	// without: whichever comes first is the answer.
	stored chan bool
}

func newHandoff() *handoff {
	return &handoff{waiting: true, jobs: make(chan *job, 1), stored: make(chan bool, 1)}
}

// tellStored offers the answer for job.stored; the first one stands.
func (h *handoff) tellStored(stored bool) {
	select {
	case h.stored <- stored:
	default:
	}
}

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

// loader is the loader of x's GetOrLoad call for the key of its base and
// the Vary names vary (see variantKey). With rv set the render refreshes
// rv.prior, and revalidates it if it has validators (see revalidate.go);
// one in its grace answers in place of a failed render (see render).
// It never writes to x.w: it may run after x's request was answered.
func (h *handoff) loader(m *Middleware, x *exchange, vary []string, rv *revalidation) func(context.Context) (response, error) {
	r, at := x.r, x.at
	at.vary = vary // the Vary names of the key looked under (a revalidation's are its prior's)
	var prior *response
	if rv != nil && !rv.purged && (rv.prior.validators() || rv.prior.GraceUntil != 0) {
		prior = rv.prior // to revalidate, or to answer if the render fails within its grace
	}
	seen, fwd := x.seen, x.fwd()
	if rv != nil && !rv.purged {
		fwd = "stale"
		if seen == nil {
			seen = rv.prior.Tags // checked before the render began (see serve)
		}
	}
	return func(ctx context.Context) (response, error) {
		h.mu.Lock()
		var j *job
		if h.waiting {
			h.waiting = false
			j = &job{ctx: ctx, done: make(chan result, 1), prior: prior, seen: seen, x: x, fwd: fwd, stored: func() bool { return <-h.stored }}
			h.jobs <- j
		}
		h.mu.Unlock()
		if j != nil {
			select {
			case res := <-j.done:
				if !errors.Is(res.err, errDeclined) {
					res = m.retryPurged(ctx, x, prior, res)
					return m.toStore(ctx, r, at, rv, res)
				}
			case <-ctx.Done():
				return response{}, ctx.Err()
			}
		}
		res := m.retryPurged(ctx, x, prior, m.background(ctx, x, prior, seen))
		return m.toStore(ctx, r, at, rv, res)
	}
}

// purgeRetries bounds the renders again of a load whose renders purges
// of their tags keep overtaking.
const purgeRetries = 3

// retryPurged returns res, the load's render, or, when a purge of one of
// its tags may have overtaken it (see registerTags), the load's render
// again, begun after that purge, for its waiters and the cache: again
// while purges keep overtaking them, up to purgeRetries times.
func (m *Middleware) retryPurged(ctx context.Context, x *exchange, prior *response, res result) result {
	for range purgeRetries {
		again, ok := purgedDuring(res)
		if !ok || ctx.Err() != nil {
			break
		}
		res = m.background(ctx, x, prior, again)
	}
	return res
}

// purgedDuring reports whether res is a render that a purge of one of its
// tags may have overtaken, and the epochs after that purge: the load
// renders once more with them, for its waiters (see registerTags).
func purgedDuring(res result) (seen []tagRef, ok bool) {
	var pd errPurgedDuringRender
	if errors.As(res.err, &pd) {
		return pd.seen, true
	}
	return nil, false
}

// background renders x's request for the cache in the background, on
// the load's context ctx (the request's values with a copy of its chi
// routing context, see detachRoute), and within the request's own
// deadline, as a render in the request's goroutine would be (see
// renderContext).
func (m *Middleware) background(ctx context.Context, x *exchange, prior *response, seen []tagRef) result {
	r := x.r
	if d, ok := r.Context().Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d)
		defer cancel()
	}
	start := time.Now()
	res := m.render(nil, r.Clone(ctx), x.next, &job{prior: prior, seen: seen, x: x})
	if m.observing() {
		o := rendered(res)
		o.kind, o.status = EventBackground, res.status
		m.observe(ctx, r.Method, x.route, time.Since(start), o)
	}
	return res
}

// toStore is what the loader of the key of at returns for the render res
// of r, with its lifetime set on ctx (engine.View.Expire).
//
// A response that varies on headers while the key was base itself (the
// first render of a resource, or the first since a write deleted its
// marker: its Vary was not known) belongs under its variant's key in a
// new generation (see generationBase), the marker's Version: it is
// stored there (cache.Set), and base gets the marker, a response with
// the Vary names, that Version and nothing else, which tells every
// process where to look and is never served (it matches no request, see
// response.matches). So the next request for the same variant is a hit,
// and the body is stored once. The marker lives twice as long as the
// response (it is a few bytes), so that the variants rendered after it
// in its generation mostly end by themselves; when it ends, each variant
// is rendered again once, as after a write. If that Set fails, the
// response itself is returned, to be stored under base as before: it is
// served only to requests it matches.
//
// Under a variant's key (at.vary set) the response is stored as it is,
// also one whose Vary changed since the marker was made (a deploy
// changed what the page varies on): it is served only to requests it
// matches, and it starts a new generation with its Vary, as a first
// render does (see moveGeneration), so that the requests for the new
// variants share one render each and are stored.
//
// A revalidation's render (rv with a key) is stored by storeRevalidated.
//
// A refresh of a stored response (rv set) whose answer ends it (see
// endsStored) ends it: within its stale window the loader says so with
// loader.ErrNotFound, on which the cache deletes the entry if it still
// holds the stale response (or, with the cache's Expiry.Negative, stores
// that nothing is there); a kept response's revalidation deletes it
// (endRevalidated).
func (m *Middleware) toStore(ctx context.Context, r *http.Request, at place, rv *revalidation, res result) (response, error) {
	var ends errEndsStored
	switch {
	case res.err != nil && rv != nil && errors.As(res.err, &ends):
		if rv.key != "" {
			m.endRevalidated(ctx, rv)
			return res.resp, res.err
		}
		return res.resp, errors.Join(loader.ErrNotFound, res.err)
	case res.err != nil:
		return res.resp, res.err
	}
	if len(at.vary) > 0 && len(res.resp.Vary) > 0 && !slices.Equal(at.vary, res.resp.Vary) {
		m.moveGeneration(ctx, r, at, res)
	}
	if rv != nil && rv.key != "" {
		return m.storeRevalidated(ctx, rv, res)
	}
	m.e.Expire(ctx, res.fresh, res.stale)
	if len(res.resp.Vary) == 0 || len(at.vary) > 0 {
		return res.resp, nil
	}
	gen := res.resp.Version
	key := variantKey(generationBase(at.base, gen), res.resp.Vary, r)
	err := cache.Set(ctx, m.c, key, res.resp, cache.WithExpiry(cache.Expiry{Fresh: res.fresh, Stale: res.stale}))
	if err != nil {
		return res.resp, nil
	}
	m.e.Expire(ctx, markerLife(res), 0) // never stale: a refresh would start a generation
	return generationMarker(&res.resp), nil
}

// moveGeneration starts a new generation of at.base's variants with res,
// a render of r under the variant's key at.key whose Vary is not the one
// of at's generation (a deploy changed what the page varies on): res is
// stored under its variant's key in the generation of its Version, and
// base's marker is replaced with that generation's, if it still is
// at's (SetIfUnchanged: a purge, a write's invalidation, or another
// render that moved it meanwhile, wins). Failures leave the marker as it
// was: the page is then served as before the move, to the requests
// each variant matches.
func (m *Middleware) moveGeneration(ctx context.Context, r *http.Request, at place, res result) {
	mk, found, err := engine.Peek[response](ctx, m.e, at.base) // not counted: the check of a write
	if err != nil && !errors.Is(err, cache.ErrStale) || !mk.marker() || mk.Version != at.gen || !slices.Equal(mk.Vary, at.vary) {
		return
	}
	key := variantKey(generationBase(at.base, res.resp.Version), res.resp.Vary, r)
	if cache.Set(ctx, m.c, key, res.resp, cache.WithExpiry(cache.Expiry{Fresh: max(res.fresh, time.Millisecond), Stale: res.stale})) != nil {
		return
	}
	_ = m.e.SetIfUnchanged(ctx, at.base, generationMarker(&res.resp), found.Raw, markerLife(res), 0)
}

// lookup is one GetOrLoad call for a request, as far as the request has
// waited for it: a render job its loader handed over, or its result.
type lookup struct {
	job    *job               // the render the loader handed to the request, if any
	res    result             // what GetOrLoad returned, if got
	got    bool               // res is set
	cancel context.CancelFunc // ends the call's context; call it once the request is answered
}

// look starts GetOrLoad for key (the key of x's base for the Vary names
// vary) in the background, with a loader that hands the render to x's
// goroutine, and waits for the first of: that job, GetOrLoad's result, or
// x's client going away.
//
// With rv set, the render revalidates rv.prior (see revalidation).
func (m *Middleware) look(x *exchange, key string, vary []string, rv *revalidation) lookup {
	h := newHandoff()
	results := make(chan result, 1)
	ctx := x.r.Context()
	// WaitTimeout bounds the wait for a render in this process too
	// (the cache's own limit is for other processes). The loader may
	// render in the background after this request has ended: give it
	// routing state of its own (see detachRoute).
	gctx, cancel := context.WithTimeout(detachRoute(ctx), m.wait)
	go func() {
		lctx := m.e.OnStored(gctx, func() { h.tellStored(true) })
		resp, err := cache.GetOrLoad(lctx, m.c, key, h.loader(m, x, vary, rv), cache.WithWaitTimeout(m.wait))
		// A write of this call's load comes before the call returns. One
		// still to come (the call gave up waiting after WaitTimeout) is
		// not counted on.
		h.tellStored(false)
		results <- result{resp: resp, err: err}
	}()

	l := lookup{cancel: cancel}
	select {
	case l.job = <-h.jobs:
	case l.res = <-results:
		l.got = true
	case <-ctx.Done():
	}
	if !l.got { // select picks at random when both are ready
		select {
		case l.res = <-results:
			l.got = true
		default:
		}
	}
	if sent := h.close(); sent != nil {
		l.job = sent
	}
	return l
}

// take decides what x does with the render job l holds: render it, or
// decline it (the loader then renders in the background) and answer with
// the stale response found (stale, cached) or, done false, with l's
// result.
func (m *Middleware) take(x *exchange, l lookup, stale bool, cached *response) (o outcome, done bool) {
	w, r, next := x.w, x.r, x.next
	j := l.job
	switch {
	case r.Context().Err() != nil:
		// The client went before taking the render: the loader does it in
		// the background, for the waiters and the cache, as it does when
		// it asks after the client went.
		j.done <- result{err: errDeclined}
		return outcome{kind: EventCanceled, err: r.Context().Err()}, true
	case l.got && l.res.err == nil, stale:
		// GetOrLoad answers (or, having found the stale response, will
		// answer) without our render: the job is the refresh it started,
		// which the loader does in the background.
		j.done <- result{err: errDeclined}
		if !l.got {
			m.write(w, r, cached, statusStale)
			return outcome{kind: EventStale}, true
		}
		return outcome{}, false
	case ranged(r):
		// Our loader was chosen to render this response, which r gets a
		// range of.
		return m.renderForRange(w, r, next, j), true
	default:
		// Our loader was chosen to render this response.
		res := m.renderFor(w, r, next, j, w)
		return rendered(res), true
	}
}

// renderFor renders r in its own goroutine for job j, answering the
// client w as it goes (what cannot be stored streams to pw: w itself, or
// a rangeRender), and hands the result to j.
//
// The render is shared: it runs on renderContext(r's, j's), so a client
// that goes away does not end it. It goes on (writes to the gone client
// are discarded), is stored and answers the waiters, unless j's context
// ends too or r's deadline passes.
func (m *Middleware) renderFor(w http.ResponseWriter, r *http.Request, next http.Handler, j *job, pw http.ResponseWriter) result {
	delivered := false
	ctx, stop := renderContext(r.Context(), j.ctx)
	defer func() {
		stop()
		if !delivered {
			j.done <- result{err: errNotStored{reasonPanicked}}
		}
	}()
	res := m.render(pw, r.WithContext(ctx), next, j)
	if res.err == nil && j.ctx.Err() != nil {
		// The load timed out (its waiters have been told) while the client
		// kept waiting: this response is the client's alone.
		res.err = errNotStored{reasonOutlasted}
		j.done <- result{err: res.err}
		delivered = true
		m.write(w, r, &res.resp, statusBypass)
		return res
	}
	j.done <- res
	delivered = true
	if res.err == nil {
		// Cache-Status says "stored" only once the cache wrote it; the
		// client waits for that write (or for the cache to give up on it).
		stored := j.stored != nil && j.stored()
		res.notStored = !stored
		m.write(w, r, &res.resp, missStatus(j.fwd, res.status, stored))
	} else if errors.As(res.err, new(errFailedGraceful)) {
		// Nothing was sent: the stored response answers (see render).
		m.write(w, r, j.prior, graceStatus(res.status))
	} // else it was passed through to pw already
	return res
}

// renderForRange renders for job j, as renderFor does, for r, a GET with
// Range, and answers r with its range of the response once it is stored.
// While the render runs it answers nobody: what a render that cannot be
// stored passes through goes to a rangeRender, which stops the handler
// at its next write, and r is then rendered alone, with its Range, as the
// render's waiters are (see serve). Passing the render's whole response
// to r instead would send a media player that asked for the end of a
// large file the whole file.
func (m *Middleware) renderForRange(w http.ResponseWriter, r *http.Request, next http.Handler, j *job) outcome {
	res := m.renderFor(w, r, next, j, &rangeRender{header: make(http.Header)})
	if res.err == nil || res.resp.Status != 0 {
		// Stored, or not but answered all the same (it outlasted the
		// load's timeout): r has had its range of it.
		return rendered(res)
	}
	if err := r.Context().Err(); err != nil {
		return outcome{kind: EventCanceled, err: err} // the client is gone
	}
	m.pass(w, r, next, statusBypass)
	return unshared(res.err)
}
