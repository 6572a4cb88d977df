package middleware_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
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
