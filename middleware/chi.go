package middleware

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// RoutePattern returns the chi route pattern that matched r (e.g.
// "/users/{id}"), for labelling cache metrics by route; "" when r was not
// routed by chi. It is the only place this package uses chi: the
// middleware itself is plain net/http and goes into r.Use or r.With as it
// is.
func RoutePattern(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return ""
	}
	return rctx.RoutePattern()
}

// detachRoute returns ctx with a copy of its chi routing context, if it
// has one. chi resets and reuses a request's routing context as soon as
// the request ends, so a render that may outlive the request (a stale
// refresh in the background) must route with a copy taken while the
// request is still being served.
func detachRoute(ctx context.Context) context.Context {
	if rctx := chi.RouteContext(ctx); rctx != nil {
		return context.WithValue(ctx, chi.RouteCtxKey, rctx.Clone())
	}
	return ctx
}
