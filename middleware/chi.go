package middleware

import (
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
