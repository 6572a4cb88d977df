package middleware

import (
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"
)

// routePattern returns the chi route pattern of r (e.g. "/users/{id}"),
// which Event.Route reports; "" when r was not routed by chi or chi has
// no route for it. Where chi routed to the middleware (r.With, a route
// group), it is the pattern matched; where the middleware runs before
// chi routes (r.Use, also in a mounted router, whose pattern so far ends
// in "/*"), it is the pattern chi will route r to, looked up in the
// router without routing (Routes.Find, with a routing context of its own:
// the request's must not change). This file is the only place this
// package uses chi: the middleware itself is plain net/http and goes into
// r.Use or r.With as it is.
func routePattern(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil {
		return ""
	}
	p := rctx.RoutePattern()
	if (p == "" || strings.HasSuffix(p, "*")) && rctx.Routes != nil {
		path := r.URL.RawPath
		if path == "" {
			path = r.URL.Path
		}
		method := rctx.RouteMethod
		if method == "" {
			method = r.Method
		}
		found := rctx.Routes.Find(chi.NewRouteContext(), method, path)
		if found == "" && method == http.MethodHead {
			// The middleware answers HEAD from GET's entry; a router
			// serving HEAD by the GET route (chi's GetHead) does too.
			found = rctx.Routes.Find(chi.NewRouteContext(), http.MethodGet, path)
		}
		if found != "" {
			return found
		}
	}
	return p
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

// saveRoute returns a function that puts the chi routing state of ctx
// (if it has one) back as it is now. chi appends the route it finds to
// that state, so a render run a second time (see render) must route from
// where the first run began, or its route pattern (r.Pattern, the
// pattern outer middlewares see) would hold the route twice.
func saveRoute(ctx context.Context) (restore func()) {
	rctx := chi.RouteContext(ctx)
	if rctx == nil {
		return func() {}
	}
	path, method := rctx.RoutePath, rctx.RouteMethod
	keys, values := slices.Clone(rctx.URLParams.Keys), slices.Clone(rctx.URLParams.Values)
	patterns := slices.Clone(rctx.RoutePatterns)
	return func() {
		rctx.RoutePath, rctx.RouteMethod = path, method
		rctx.URLParams.Keys, rctx.URLParams.Values = keys, values
		rctx.RoutePatterns = patterns
	}
}
