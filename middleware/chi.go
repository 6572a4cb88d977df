package middleware

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// routePattern returns the chi route pattern matched so far for r (e.g.
// "/users/{id}"), which Event.Route reports; "" when r was not routed by
// chi. This file is the only place this package uses chi: the middleware
// itself is plain net/http and goes into r.Use or r.With as it is.
func routePattern(r *http.Request) string {
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

// routeMethod returns the method chi routes r by: "" before chi has
// routed it (the middleware in the router's own r.Use), or without chi.
// It is "GET" for a HEAD that chi's GetHead sent to a GET route.
func routeMethod(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return ""
	}
	return rctx.RouteMethod
}
