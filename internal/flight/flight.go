// Package flight is a typed, context-aware singleflight: concurrent calls
// for one key share one execution of a function, and each caller waits
// only as long as its own context allows.
//
// Unlike golang.org/x/sync/singleflight, the shared function runs in a
// goroutine of its own on a context detached from every caller (so one
// caller giving up cancels nothing the others wait for), and a panic in it
// becomes an error (the owner's Recover makes it) delivered to every
// caller instead of crashing the process.
package flight

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync"
)

// Recover turns a panic into an error: value is what the function
// panicked with, stack the stack of the goroutine that panicked. Package
// cache makes a *loader.PanicError, which is what its callers match; the
// owner decides, so that this package imports nothing above it.
type Recover func(value any, stack []byte) error

// Call runs fn and turns a panic into the error rec returns (nil rec: an
// error that names the value; the stack is lost).
func Call[V any](ctx context.Context, fn func(context.Context) (V, error), rec Recover) (v V, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero V
			v, err = zero, rec.error(r, debug.Stack())
		}
	}()
	return fn(ctx)
}

func (rec Recover) error(value any, stack []byte) error {
	if rec == nil {
		return fmt.Errorf("flight: panic: %v", value)
	}
	return rec(value, stack)
}

type call[V any] struct {
	done   chan struct{} // closed when val and err are set
	val    V
	err    error
	joined int // callers waiting on it; guarded by Group.mu
	left   int // of those that joined it, the ones whose own ctx ended first; guarded by Group.mu
}

// Group coalesces calls by key. The zero value is ready to use; a Group
// must not be copied after first use. It is safe for concurrent use.
type Group[V any] struct {
	// Recover turns a panic in a call's fn into the call's error, which
	// every caller of the call gets. Set it before first use. Nil: an
	// error that names the value.
	Recover Recover

	// Finished, if set, is called once for every call, when it has its
	// result (v, err) and no caller can join it any more, just before its
	// callers are handed that result (so what it reports is seen before
	// any of them returns), with how many callers it has: the one that
	// started it (whether or not it still waits: the call is its), and
	// those that joined it, less those whose own ctx ended before then. It runs in the call's goroutine (in the starting
	// caller's when start failed), under no lock. Set it before first
	// use.
	Finished func(key string, v V, err error, callers int)

	mu    sync.Mutex // guards calls; never held while fn runs
	calls map[string]*call[V]
}

// Starter prepares a call: it returns the context fn runs on and a
// function to call when fn has returned (e.g. a timeout's cancel), or an
// error that becomes the call's result without running fn (e.g. the owner
// is shutting down). It runs in the goroutine that starts the call, before
// fn's goroutine exists, so an owner can count the goroutine before it runs.
type Starter func() (context.Context, func(), error)

// Do runs fn for key unless a call for key is already running, in which
// case it waits for that call's result. shared reports whether the caller
// joined a call started by another. fn runs on ctx(), a context the Group
// obtains from start when it starts the call; Do returns ctx.Err() as soon
// as the caller's own ctx ends, leaving the call running for the others.
//
// start is called under no lock and must return the context for fn and a
// function to call when fn has returned (e.g. a timeout's cancel).
func (g *Group[V]) Do(ctx context.Context, key string, start Starter, fn func(context.Context) (V, error)) (v V, err error, shared bool) {
	c, leader := g.join(key)
	if leader {
		g.launch(key, c, start, fn)
	}
	select {
	case <-c.done:
		return c.val, c.err, !leader
	case <-ctx.Done():
		if !leader {
			g.leave(c)
		}
		var zero V
		return zero, ctx.Err(), !leader
	}
}

// Begin is Do in two steps: it starts fn for key, or joins the call in
// progress, and returns at once; wait then waits for the result as Do
// does, returning ctx.Err() as soon as the caller's own ctx ends. shared
// reports whether the caller joined a call started by another. A caller
// that learns, before waiting, whether it leads can act on it (a batch
// leading many keys loads them together).
func (g *Group[V]) Begin(key string, start Starter, fn func(context.Context) (V, error)) (wait func(ctx context.Context) (V, error), shared bool) {
	c, leader := g.join(key)
	if leader {
		g.launch(key, c, start, fn)
	}
	return func(ctx context.Context) (V, error) {
		select {
		case <-c.done:
			return c.val, c.err
		case <-ctx.Done():
			if !leader {
				g.leave(c)
			}
			var zero V
			return zero, ctx.Err()
		}
	}, !leader
}

// Start starts fn for key in the background unless a call for key is
// running already. It reports whether it started one.
func (g *Group[V]) Start(key string, start Starter, fn func(context.Context) (V, error)) bool {
	c, leader := g.join(key)
	if leader {
		g.launch(key, c, start, fn)
	}
	return leader
}

func (g *Group[V]) join(key string) (*call[V], bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		c.joined++
		return c, false
	}
	if g.calls == nil {
		g.calls = make(map[string]*call[V])
	}
	c := &call[V]{done: make(chan struct{}), joined: 1}
	g.calls[key] = c
	return c, true
}

func (g *Group[V]) launch(key string, c *call[V], start Starter, fn func(context.Context) (V, error)) {
	ctx, finish, err := start()
	if err != nil {
		g.finish(key, c, c.val, err)
		return
	}
	go func() {
		defer finish()
		v, err := Call(ctx, fn, g.Recover)
		g.finish(key, c, v, err)
	}()
}

func (g *Group[V]) finish(key string, c *call[V], v V, err error) {
	c.val, c.err = v, err
	g.mu.Lock()
	if g.calls[key] == c { // not forgotten and replaced meanwhile
		delete(g.calls, key)
	}
	callers := c.joined - c.left // no caller joins c from now on
	g.mu.Unlock()
	if g.Finished != nil {
		g.Finished(key, v, err, callers)
	}
	close(c.done)
}

// leave counts a caller that joined c and whose own ctx ended, unless c
// finished first (its result was there to take). A caller that leaves
// after Finished was called is counted there all the same.
func (g *Group[V]) leave(c *call[V]) {
	g.mu.Lock()
	select {
	case <-c.done:
	default:
		c.left++
	}
	g.mu.Unlock()
}

// Forget makes later calls for key start a new call instead of joining the
// one in progress, which still runs and still answers the callers that
// joined it. Use it when what that call computes has become outdated.
func (g *Group[V]) Forget(key string) {
	g.mu.Lock()
	delete(g.calls, key)
	g.mu.Unlock()
}

// Attach counts the caller as one of the callers of the call for key in
// progress, without waiting for it, and reports whether one was; it
// starts none. (A background refresh counts so the readers it serves.)
func (g *Group[V]) Attach(key string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		c.joined++
		return true
	}
	return false
}

// Joined returns how many callers have joined the call for key that is in
// progress (counting the one that started it), or 0 if none is.
func (g *Group[V]) Joined(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if c, ok := g.calls[key]; ok {
		return c.joined
	}
	return 0
}
