package middleware

import (
	"context"
	"sync/atomic"
)

// job is a render requested by the cache's loader from the request's own
// goroutine. ctx is the loader's: detached from every client and ended by
// the cache's LoadTimeout; for a client's no-cache render, which nobody
// else waits for, it is the request's own. The render takes its values
// from the request's context, not from ctx (see renderContext).
type job struct {
	ctx   context.Context
	done  chan result
	prior *response // the stored response the render revalidates, or may answer in place of a failure (GraceUntil), if any
	seen  []tagRef  // the epochs of tag records known before the render (see registerTags)
	x     *exchange // the request the render is for, whose look found prior; nil for a client's no-cache render
	fwd   string    // why the render's request was forwarded, for Cache-Status: uri-miss, vary-miss, stale or request
	// stored, called once the render is in done, waits until the cache
	// has written it or will not, and reports which: the response says
	// "stored" only then. nil: it is not stored.
	stored func() bool
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
// its response through to the client (it streamed, or outgrew StoreLimit:
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
// flushes what is never stored) thus stops when its client goes, as
// without the cache.
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
