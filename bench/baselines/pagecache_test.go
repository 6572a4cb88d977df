package baselines

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestPageCache: concurrent requests for a page not stored share one
// render in the process (one MISS, the others HIT, from that render or
// the stored page); later ones are hits; Purge and PurgeAll make the next
// request render again.
func TestPageCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var renders atomic.Int32
	release := make(chan struct{})
	rendering := make(chan struct{}, 1)
	page := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := renders.Add(1)
		if n == 1 {
			rendering <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		w.Header().Set("ETag", `"v1"`)
		_, _ = w.Write([]byte("page"))
	})
	var pc PageCache
	h := pc.Handler(page)
	get := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/p?a=1", nil))
		return w
	}
	const n = 8
	got := make(chan *httptest.ResponseRecorder, n)
	go func() { got <- get() }()
	select {
	case <-rendering:
	case <-ctx.Done():
		t.Fatal("no render")
	}
	for range n - 1 {
		go func() { got <- get() }()
	}
	close(release)
	misses := 0
	for range n {
		w := <-got
		if w.Code != 200 || w.Body.String() != "page" || w.Header().Get("ETag") != `"v1"` {
			t.Errorf("answer %d %q %v", w.Code, w.Body.String(), w.Header())
		}
		switch x := w.Header().Get("X-Cache"); x {
		case "MISS":
			misses++
		case "HIT":
		default:
			t.Errorf("X-Cache %q", x)
		}
	}
	if misses != 1 || renders.Load() != 1 {
		t.Errorf("%d misses, %d renders; want 1 and 1", misses, renders.Load())
	}
	if w := get(); w.Header().Get("X-Cache") != "HIT" || w.Header().Get("Cache-Status") != "pagecache; hit" || renders.Load() != 1 {
		t.Errorf("after the render: %v, %d renders", w.Header(), renders.Load())
	}
	pc.Purge("example.com/p?a=1")
	if w := get(); w.Header().Get("X-Cache") != "MISS" || renders.Load() != 2 {
		t.Errorf("after Purge: %v, %d renders", w.Header(), renders.Load())
	}
	pc.PurgeAll()
	if w := get(); w.Header().Get("X-Cache") != "MISS" || renders.Load() != 3 {
		t.Errorf("after PurgeAll: %v, %d renders", w.Header(), renders.Load())
	}
}
