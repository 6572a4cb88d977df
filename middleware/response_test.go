package middleware_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/hotkv/stampede/internal/redistest"
)

// TestMiddleware_preconditionsOnly2xx: a stored response other than a 2xx
// is served whole whatever the request's If-None-Match (RFC 9110
// 13.2.1; issue 10, 8).
func TestMiddleware_preconditionsOnly2xx(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	var renders atomic.Int32
	b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		w.Header().Set("ETag", `"t1"`)
		if r.URL.Path == "/gone" {
			w.WriteHeader(http.StatusNotFound)
		}
		fmt.Fprintf(w, "%s %d", r.URL.Path, n)
	}), &bedOptions{procs: 2})
	b.get(t, "/gone").check(t, 404, "MISS", "/gone 1")
	for _, inm := range []string{"*", `"t1"`, `W/"t1"`} {
		b.get(t, "/gone", "If-None-Match", inm).check(t, 404, "HIT", "/gone 1")
		b.get(t, "/gone", "If-None-Match", inm, procHeader, "1").check(t, 404, "HIT", "/gone 1")
	}
	b.get(t, "/ok").check(t, 200, "MISS", "/ok 2")
	b.get(t, "/ok", "If-None-Match", "*").check(t, 304, "HIT", "")
	b.get(t, "/ok", "If-None-Match", `"t1"`, procHeader, "1").check(t, 304, "HIT", "")
}
