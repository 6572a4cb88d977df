// Package failpoint lets a test stop a process between two steps of the
// library's protocols, in the manner of etcd's gofail but without code
// generation: each step boundary calls Inject with its point's name, and
// a test that called Enable gets the call, in the goroutine of the step.
// The hook may record the name (a trace point), sleep or block (pause the
// step) or os.Exit (crash between two steps).
//
// With no hook set, Inject is one atomic load: the points cost nothing a
// benchmark can see, and none sits on a hit path.
//
// The points are the constants below, named "package/step"; each says
// where it fires. A point fires after what its name says is done and
// before the next step begins, in every path that runs that step (single
// key, batch, refresh), once per batch step where a batch handles many
// keys at once.
//
// NOTE: the hook is the library's one mutable package variable, for
// tests only. It is process-wide: a test that sets it must not run in
// parallel with other tests that set it, and should tell its own calls
// from others' by ctx's values.
package failpoint

import (
	"context"
	"sync/atomic"
)

// The points of package cache. Their ctx is the context of the flight or
// batch that rebuilds the key (the values of the call that started it;
// for a background refresh the values of the call that found the value
// stale), or the write context derived from it, which keeps its values.
const (
	// CacheClaimed fires once a rebuild holds its claim: the claim on the
	// value key of a miss (cache/miss.go: claimMiss), the rebuild lock of
	// a value nobody can use once the key is found to still hold it
	// (cache/stale.go: replaceUnusable), or the claims a batch won
	// (cache/many_load.go: batch.loadClaimed, once per batch); before the
	// loader runs.
	CacheClaimed = "cache/claimed"
	// CacheLoaded fires once the loader of a claimed rebuild returned,
	// whatever it returned, before the write that replaces the claim
	// (cache/miss.go: loadClaimed; cache/stale.go: replaceUnusable;
	// cache/many_load.go: writeBack, once per batch).
	CacheLoaded = "cache/loaded"
	// CacheWritten fires once a rebuild's conditional write of its value
	// returned, whether it wrote or found the key changed, before the
	// announcement: the Replace of a claim (cache/miss.go: loadClaimed;
	// cache/many_load.go: writeBack, once per batch) and the write beside
	// a rebuild lock, refreshes included (cache/stale.go: replaceOld;
	// cache/many_load.go: refreshBatch, once per batch). It does not fire
	// where there was nothing to write (a failed load, a not-found that
	// is not stored).
	CacheWritten = "cache/written"
	// CacheAnnounced fires once a rebuild's outcome was announced (or the
	// announcement skipped, the server being down), before the claim or
	// rebuild lock is released where it is: every announcement of a
	// rebuild, refreshes included (cache/load.go: announce, which every
	// single-key path calls; cache/many_load.go: announceAll, once per
	// batch).
	CacheAnnounced = "cache/announced"
	// CacheRefreshClaimed fires once a background refresh holds the
	// rebuild lock, the key still holds the stale value and no load of
	// the key runs in this process, before the loader runs
	// (cache/stale.go: refreshStale; cache/many_load.go: refreshBatch,
	// once per batch).
	CacheRefreshClaimed = "cache/refresh-claimed"
	// CacheRefreshLoaded fires once a background refresh's loader
	// returned, whatever it returned, before its conditional write
	// (cache/stale.go: refreshStale; cache/many_load.go: refreshBatch,
	// once per batch).
	CacheRefreshLoaded = "cache/refresh-loaded"
	// CacheWait fires when a caller starts waiting for another process's
	// claim or rebuild lock, once per wait (counted in Stats.Waits),
	// before the wait's first subscribe or poll (cache/wait.go: fillOn;
	// cache/many.go: awaitClaim, for each key of a batch that found
	// another's claim). A trace point: a call that reaches it waited.
	CacheWait = "cache/wait"
	// CacheSubscribed fires when a waiter's subscription to the key's
	// channel has been confirmed by the server (or its wait for that
	// ended), before the read that follows (cache/wait.go: await). A
	// trace point: an announcement published before it reached nobody
	// here, and only that read can find what it said.
	CacheSubscribed = "cache/subscribed"
	// CacheDown fires when a call does not read the server because the
	// cache is failing open (its FailOpenCooldown after a server error):
	// GetOrLoad's and Get's read (cache/getorload.go: fromServer) and a
	// batch's (cache/many.go: read). A trace point: a call that reaches
	// it is one the docs promise nothing about other processes' writes.
	CacheDown = "cache/down"
)

// The points of package lock. Their ctx is the context of the call.
const (
	// LockObtained fires once Obtain (and Do, RunOnce) got the lock and
	// reported it, before it returns it (lock/lock.go: obtainWith).
	// ObtainMany does not fire it: package cache's claims have
	// CacheClaimed.
	LockObtained = "lock/obtained"
	// LockRelease fires when Release is called, before the release is
	// sent (lock/lock.go: release; Do and RunOnce release through it).
	LockRelease = "lock/release"
	// LockRefresh fires before each refresh that a keep-alive sends: in
	// KeepAlive's (and Do's) refresh goroutine, its ctx the one given to
	// KeepAlive, while the keep-alive goes on watching the lock's expiry
	// (lock/do.go: keepAlive); in KeepAliveMany's goroutine, before each
	// round's pipeline (lock/many.go: refreshAll).
	LockRefresh = "lock/refresh"
)

// The points of package middleware.
const (
	// MiddlewareRendered fires once a render finished with a response
	// that may be stored, before it is handed to the cache to store
	// (middleware/render.go: render). Its ctx is the render's request's.
	MiddlewareRendered = "middleware/rendered"
	// MiddlewarePurge fires before the write of a purge: PurgeURL's
	// delete (middleware/purge.go: PurgeURL, and servePurge for a PURGE
	// of a URL) and PurgeTag's writes, once per call (middleware/tags.go:
	// PurgeTag). Its ctx is the call's.
	MiddlewarePurge = "middleware/purge"
)

// hook is the function Enable set; nil when none is.
var hook atomic.Pointer[func(ctx context.Context, name string)]

// Inject calls the hook set by Enable, if any, with ctx and the point's
// name, in the calling goroutine, and returns when the hook returns.
// Without a hook it is one atomic load. It is safe for concurrent use.
func Inject(ctx context.Context, name string) {
	if fn := hook.Load(); fn != nil {
		(*fn)(ctx, name)
	}
}

// Enable makes fn the hook (replacing any); the returned func removes it,
// unless another Enable replaced it since. A nil fn removes the hook. fn
// is called concurrently, from every goroutine that reaches a point; once
// disable returns, later Injects do not call it, but a call that began
// before (its Inject loaded fn) may still be running. It is safe for
// concurrent use.
func Enable(fn func(ctx context.Context, name string)) (disable func()) {
	if fn == nil {
		hook.Store(nil)
		return func() {}
	}
	p := &fn
	hook.Store(p)
	return func() { hook.CompareAndSwap(p, nil) }
}
