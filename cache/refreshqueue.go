package cache

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A Batcher's background refreshes (batcher.go), batched across calls. A
// refresh that falls due in a Batcher's call (a stale or early-refresh
// value served by GetOrLoad, GetOrLoadMany or the near cache) goes as
// every refresh does up to its claim: a flight of Cache.refreshes for the
// key, so that the process runs one at a time, which takes the key's
// rebuild lock (lockStale: lock.ObtainMany, sent with the process's
// concurrent claims), so that the cluster runs one; a process that does
// not get it goes on serving the stale value. Instead of loading at once,
// the claimed key joins the open round of its call's settings. A round is
// sent to the loader when Window has passed since it opened, or at once
// when it holds MaxKeys keys; from there on it is refreshBatch's
// (refreshHeld): the keys read again, one loader call, each key written
// only if it still holds the stale value, the outcomes announced, the
// locks freed. No caller waits for any of it.
//
// The flight of a round's first key leads the round: it waits for the
// window or a full round, then refreshes every key of it. The flights of
// the other keys wait for the round to end, so that a refresh of one of
// them is not started again meanwhile. Close cancels the leader's context
// (as every background flight's): an open round is then abandoned,
// nothing loaded, its locks freed.
//
// While a round is open its rebuild locks are not refreshed: Window is
// below LockTTL/3 (NewBatcher checks), and refreshHeld's keep-alive
// (lock.Client.KeepAliveMany) is first due LockTTL/3 after the earliest
// lock was taken, so each is set back to LockTTL before it could expire.
// A lock lost anyway (the process stalled) is seen by the conditional
// write, which does not happen.

// refreshQueue is the rounds of one Batcher.
type refreshQueue struct {
	c      *Cache
	load   manyLoader
	window time.Duration
	max    int
	// timer starts the window of a round; tests replace it to hold
	// windows open or end them.
	timer func(time.Duration) (end <-chan time.Time, stop func() bool)

	mu   sync.Mutex          // guards open and every open round's held
	open map[roundKey]*round // the rounds taking keys, by their settings

	tried atomic.Int64 // claims tried (taken or not), for tests
}

func newRefreshQueue(c *Cache, load manyLoader, window time.Duration, maxKeys int) *refreshQueue {
	return &refreshQueue{c: c, load: load, window: window, max: maxKeys, timer: startTimer, open: make(map[roundKey]*round)}
}

func startTimer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

// roundKey is what keys must share to be loaded in one round: their
// calls' settings (the stored entries' lifetimes and tags).
type roundKey struct {
	fresh, stale, negative, wait time.Duration
	tags                         string // the tags, each followed by a NUL
	backend                      string // whose permit the round's loader call takes
}

func roundKeyOf(it itemSettings) roundKey {
	var tags strings.Builder
	for _, t := range it.tags {
		tags.WriteString(t)
		tags.WriteByte(0)
	}
	return roundKey{fresh: it.fresh, stale: it.stale, negative: it.negative, wait: it.wait, tags: tags.String(), backend: it.backend}
}

// round is keys claimed to be refreshed in one loader call.
type round struct {
	key  roundKey
	it   itemSettings
	held []staleLock   // guarded by refreshQueue.mu while the round is open
	full chan struct{} // closed when it holds MaxKeys keys
	done chan struct{} // closed when its refresh ended
	// loaded holds the keys (by the caller's key) the round's loader
	// call loaded; written by the leader before done closes.
	loaded map[string]bool
}

// add starts the refresh of s, served stale by a call with settings it,
// unless this process runs one for its key already.
func (q *refreshQueue) add(ctx context.Context, s staleKey, it itemSettings) {
	c := q.c
	if c.refreshes.Attach(s.k.value) {
		return // the caller, served stale, is one of that refresh's readers (Event.Callers)
	}
	s.old = bytes.Clone(s.old)
	// The flight waits up to Window in its round before the load.
	c.refreshes.Start(s.k.value, c.background(ctx, addSat(it.wait, q.window)), func(ctx context.Context) (string, error) {
		if q.refresh(ctx, s, it) {
			return s.k.user, nil
		}
		return "", nil
	})
}

// refresh is the flight of s: claim its rebuild lock, join a round, and
// lead the round or wait for it to end. It reports whether the round
// loaded s's key.
func (q *refreshQueue) refresh(ctx context.Context, s staleKey, it itemSettings) (loaded bool) {
	held := q.c.lockStale(ctx, []staleKey{s})
	q.tried.Add(1)
	if len(held) == 0 {
		return false // another process refreshes it, or the server failed: served stale meanwhile
	}
	r, lead := q.join(it, held[0])
	if !lead {
		select {
		case <-r.done:
			return r.loaded[s.k.user]
		case <-ctx.Done(): // Close: the leader abandons the round
			return false
		}
	}
	defer close(r.done)
	q.lead(ctx, r)
	return r.loaded[s.k.user]
}

// join puts h in the open round of settings it, opening one if there is
// none (lead: the caller leads it); a round that is full is closed to
// others.
func (q *refreshQueue) join(it itemSettings, h staleLock) (r *round, lead bool) {
	rk := roundKeyOf(it)
	q.mu.Lock()
	defer q.mu.Unlock()
	r = q.open[rk]
	if r == nil {
		r = &round{key: rk, it: it, full: make(chan struct{}), done: make(chan struct{})}
		q.open[rk] = r
		lead = true
	}
	r.held = append(r.held, h)
	if len(r.held) >= q.max {
		delete(q.open, rk)
		close(r.full)
	}
	return r, lead
}

// lead waits for r's window to end, or for r to be full, and refreshes
// its keys; when ctx ends first (Close), it frees their locks instead.
func (q *refreshQueue) lead(ctx context.Context, r *round) {
	end, stop := q.timer(q.window)
	defer stop()
	select {
	case <-end:
	case <-r.full:
	case <-ctx.Done():
	}
	held := q.take(r)
	if ctx.Err() != nil {
		q.abandon(ctx, held)
		return
	}
	r.loaded = q.c.refreshHeld(ctx, r.it, held, q.load)
}

// take closes r to other keys and returns its keys.
func (q *refreshQueue) take(r *round) []staleLock {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.open[r.key] == r {
		delete(q.open, r.key)
	}
	return r.held
}

// abandon frees the locks of held, whose refresh will not happen: other
// processes may refresh the keys at once, rather than after LockTTL.
func (q *refreshQueue) abandon(ctx context.Context, held []staleLock) {
	wctx, cancel := writeContext(ctx)
	defer cancel()
	parallel(len(held), func(i int) {
		q.c.release(wctx, held[i].cl.k, held[i].cl.l)
	})
}
