package stampedeotel_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/metrics/metricstest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The middleware's metrics and render spans carry the semantic
// conventions' HTTP attributes: http.route, http.request.method (a method
// they do not know as _OTHER: the client chooses it) and
// http.response.status_code; a 5xx is a failure, its error.type the
// status code; a MISS's render span is a child of the request's span.
func TestMiddlewareObserver_http(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	b := newBed(t, nil)
	mw := metricstest.NewMiddleware(t, s.Client(t), b.tel.MiddlewareObserver("pages"))
	requests := make(chan trace.Span, 4) // the spans of the requests, as a tracing middleware starts them
	tracing := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, span := b.tp.Tracer("test").Start(r.Context(), "request")
			defer span.End()
			requests <- span
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", tracing(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "user ", r.PathValue("id"))
	}))))
	mux.Handle("GET /fail", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	})))
	mux.Handle("/any/{id}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, r.Method)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for _, req := range []struct{ method, path string }{{"GET", "/users/1"}, {"GET", "/fail"}, {"FOO", "/any/1"}} {
		r, err := http.NewRequestWithContext(metricstest.Context(t), req.method, srv.URL+req.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	const events, duration = "stampede.middleware.events", "stampede.middleware.duration"
	pages := mwAttr("pages")
	b.waitFor(t, 1, events, pages, route("/users/{id}"), method("GET"), status(200), event("miss"))
	b.waitFor(t, 1, events, pages, route("/fail"), method("GET"), status(503), event("bypass"), reason("server error"))
	b.waitFor(t, 1, events, pages, route("/any/{id}"), method("_OTHER"), status(200), event("bypass"), reason("method"))
	b.want(t, 1, duration, pages, route("/users/{id}"), method("GET"), status(200), event("miss"))
	b.want(t, 1, duration, pages, route("/fail"), method("GET"), status(503), event("bypass"), errType("503"))
	b.want(t, 1, duration, pages, route("/any/{id}"), method("_OTHER"), status(200), event("bypass"))
	for _, set := range b.pointSets(t, duration) {
		for _, k := range []attribute.Key{"http.request.method", "http.response.status_code", "http.route"} {
			if !set.HasValue(k) {
				t.Errorf("%s point %v has no %s", duration, set.ToSlice(), k)
			}
		}
		if v, _ := set.Value("http.request.method"); v.AsString() == "FOO" {
			t.Errorf("%s point %v holds the client's own method", duration, set.ToSlice())
		}
	}

	render := only(t, "render", b.ended("stampede.middleware.render"))
	childOf(t, "render", render, <-requests)
	for k, want := range map[string]string{"http.route": "/users/{id}", "http.request.method": "GET", "http.response.status_code": "200"} {
		if got := attr(render, k); got != want {
			t.Errorf("render span %s = %q, want %q", k, got, want)
		}
	}
	if render.Status().Code != codes.Unset || attr(render, "error.type") != "" {
		t.Errorf("render span status %v, error.type %q; want unset, none", render.Status(), attr(render, "error.type"))
	}
}
