package middleware_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// TestMiddleware_varyFirstRender: the first response that carries Vary is
// stored under its variant's key, so the next request with the same
// header values is a hit (before the fix it rendered again: MISS, MISS,
// HIT), in the process that rendered it and in one that has not seen the
// Vary yet; the plain key holds only a marker without the body.
func TestMiddleware_varyFirstRender(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		renders := 0
		b := newTestBed(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			renders++
			w.Header().Set("Vary", "Accept-Language")
			w.Header().Set("Cache-Control", "max-age=60")
			fmt.Fprintf(w, "n=%d lang=%s", renders, r.Header.Get("Accept-Language"))
		}), &bedOptions{procs: 2})
		steps := []struct {
			proc, lang, xcache, body string
		}{
			{"0", "en", "MISS", "n=1 lang=en"},
			{"0", "en", "HIT", "n=1 lang=en"},
			{"1", "en", "HIT", "n=1 lang=en"}, // a process that has not seen the Vary
			{"1", "de", "MISS", "n=2 lang=de"},
			{"0", "de", "HIT", "n=2 lang=de"},
			{"0", "en", "HIT", "n=1 lang=en"},
		}
		for _, st := range steps {
			b.get(t, "/v", procHeader, st.proc, "Accept-Language", st.lang).check(t, 200, st.xcache, st.body)
			if st.xcache == "MISS" {
				// The client is answered before the response is stored.
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				redistest.WaitFor(t, ctx, "the variant stored", func() bool {
					return b.stored(t, "/v") && b.stored(t, "/v", "\nvary Accept-Language: "+st.lang)
				})
				cancel()
			}
		}
		if renders != 2 {
			t.Errorf("renders = %d, want 2", renders)
		}
		// The body is stored once, under the variant's key.
		raw, err := b.rc.Get(context.Background(), b.valueKey("/v")).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(raw, []byte("lang=en")) {
			t.Errorf("the plain key holds the response %q, want a marker", raw)
		}
		if !b.stored(t, "/v", "\nvary Accept-Language: en") || !b.stored(t, "/v", "\nvary Accept-Language: de") {
			t.Error("a variant is not stored under its key")
		}
	}, redistest.Redis8, redistest.Cluster)
}

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
	m1, err := middleware.New(c, &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	m2, err := middleware.New(c, &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: time.Minute}}) // "another process"
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
