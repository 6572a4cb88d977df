package middleware_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// Stats counts each HTTP request once. A request
// whose first look goes to the base key (the process does not know yet
// that the response varies: a second process, or a vary index that was
// reset) finds another variant there through GetOrLoad (counted as a hit),
// looks again under its variant's key and is answered by Get there:
// it must count one hit (GetOrLoad's), not two.
func TestMiddleware_Stats_varyRelookCountsOnce(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	c, err := cache.New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", "Accept-Language")
		fmt.Fprint(w, "lang=", r.Header.Get("Accept-Language"))
	})
	m1, err := middleware.New(c, &middleware.Options{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := middleware.New(c, &middleware.Options{TTL: time.Minute}) // "another process"
	if err != nil {
		t.Fatal(err)
	}
	s1, s2 := m1.Handler(h), m2.Handler(h)
	do := func(s http.Handler, lang string) string {
		req := httptest.NewRequest(http.MethodGet, "http://example.com/page", nil)
		req.Header.Set("Accept-Language", lang)
		w := httptest.NewRecorder()
		s.ServeHTTP(w, req)
		return w.Header().Get("X-Cache")
	}
	// m1 stores "en" under the base key (it did not know the Vary yet),
	// then "fr" under its variant key; wait until both are stored.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	redistest.WaitFor(t, ctx, "both variants stored", func() bool {
		return do(s1, "en") == "HIT" && do(s1, "fr") == "HIT"
	})
	before := c.Stats()
	if got := do(s2, "fr"); got != "HIT" {
		t.Fatalf("X-Cache %q, want HIT", got)
	}
	after := c.Stats()
	if d := after.Hits - before.Hits; d != 1 || after.Misses != before.Misses {
		t.Errorf("one HIT request counted %d hits and %d misses; want 1 hit", d, after.Misses-before.Misses)
	}
}
