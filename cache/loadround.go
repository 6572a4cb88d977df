package cache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hotkv/stampede/internal/flight"
	"github.com/hotkv/stampede/loader"
)

// A Batcher's loads of single keys (batcher.go): a missing key of Get, or
// a stored value it must replace. Each goes as every load does (fill,
// miss.go): the key claimed on its own, its claim kept alive while the
// loader runs, the value written in place of the claim, announced,
// released; so that other processes wait for it as for any load. Only
// the loader call is shared: the key's loader joins the open round, and
// the round's keys go to the batch loader together, Window after the
// round opened or at once when it holds MaxKeys keys. The claims are kept
// alive all the while (the round is part of each key's load), and each
// key's LoadTimeout counts from its own start, its wait in the round
// included.
//
// The loader call runs on a context of the Cache, detached from the keys'
// loads (a load whose callers all left does not cancel the others'),
// limited by LoadTimeout and cancelled by Close. A lifetime set from
// inside the loader (expire, as runMany allows a batch's) applies to
// every key of the round.

// loadRounds are the rounds of one Batcher's single-key loads.
type loadRounds[V any] struct {
	c    *Cache
	q    *refreshQueue // for its window, size and timer, which the rounds share
	load func(context.Context, []string) (map[string]V, error)

	mu   sync.Mutex               // guards open and its rounds' keys
	open map[string]*loadRound[V] // the round taking keys, by backend (Options.Backends; "": none)

	joined atomic.Int64 // loads that joined a round, for tests
}

// loadRound is single-key loads sent to the loader in one call.
type loadRound[V any] struct {
	backend string              // of every key's call: the round's loader call takes its permit
	keys    []string            // distinct; guarded by loadRounds.mu while open
	in      map[string]struct{} // keys' set
	full    chan struct{}       // closed when it holds MaxKeys keys
	done    chan struct{}       // closed once got, err and exp are set
	got     map[string]V
	err     error
	exp     expiry // what the loader set with Expire
}

// get is the loader of key for a Batcher's Get: it loads key in a round
// of keys of the same backend. A capped backend's permit is the round's,
// taken for its one loader call, not each key's (the Batcher's Get loads
// its key without one; see Batcher.Get).
func (lr *loadRounds[V]) get(ctx context.Context, key string, it itemSettings) (V, error) {
	var zero V
	r, lead := lr.join(key, it.backend)
	lr.joined.Add(1)
	if lead {
		lr.lead(ctx, r, it)
	}
	select {
	case <-r.done:
	case <-ctx.Done():
		return zero, ctx.Err()
	}
	if r.exp.set {
		expire(ctx, r.exp.fresh, r.exp.stale)
	}
	if r.err != nil {
		return zero, r.err
	}
	v, ok := r.got[key]
	if !ok {
		return zero, loader.ErrNotFound
	}
	return v, nil
}

// join puts key in the open round, opening one if there is none (lead:
// the caller leads it); a round that is full is closed to others.
func (lr *loadRounds[V]) join(key, backend string) (r *loadRound[V], lead bool) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	r = lr.open[backend]
	if r == nil {
		r = &loadRound[V]{backend: backend, in: make(map[string]struct{}), full: make(chan struct{}), done: make(chan struct{})}
		if lr.open == nil {
			lr.open = make(map[string]*loadRound[V])
		}
		lr.open[backend] = r
		lead = true
	}
	if _, dup := r.in[key]; !dup {
		r.in[key] = struct{}{}
		r.keys = append(r.keys, key)
	}
	if len(r.keys) >= lr.q.max {
		delete(lr.open, backend)
		close(r.full)
	}
	return r, lead
}

// lead waits for r's window to end, or for r to be full, or for the
// leader's own load to end (the others still need the round), closes r to
// other keys and starts its loader call.
func (lr *loadRounds[V]) lead(ctx context.Context, r *loadRound[V], it itemSettings) {
	end, stop := lr.q.timer(lr.q.window)
	select {
	case <-end:
	case <-r.full:
	case <-ctx.Done():
	}
	stop()
	lr.mu.Lock()
	if lr.open[r.backend] == r {
		delete(lr.open, r.backend)
	}
	names := r.keys
	lr.mu.Unlock()
	c := lr.c
	bctx, finish, err := c.background(ctx, 0)()
	if err != nil { // Close
		r.err = err
		close(r.done)
		return
	}
	go func() {
		defer finish()
		defer close(r.done)
		lctx, cancel := context.WithTimeout(context.WithValue(bctx, expiryKey{}, &r.exp), c.s.loadTimeout)
		defer cancel()
		ks := make([]keys, len(names))
		for i, k := range names {
			ks[i] = c.keys(k)
		}
		release, _, err := c.permit(lctx, itemSettings{backend: r.backend, wait: it.wait}, ks)
		if err != nil {
			r.err = err
			return
		}
		defer release()
		r.got, r.err = flight.Call(lctx, func(ctx context.Context) (map[string]V, error) { return lr.load(ctx, names) }, panicError)
		if errors.Is(r.err, loader.ErrNotFound) {
			r.got, r.err = nil, nil // none of them: each is not found
		}
	}()
}
