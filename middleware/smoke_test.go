package middleware_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
)

func TestMain(m *testing.M) { redistest.Main(m, workers) }

func TestSmoke(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	c, err := cache.New(s.Client(t), &cache.Options{Namespace: "smoke" + time.Now().Format("150405.000")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var renders atomic.Int32
	h := middleware.Cache(c, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, "hello "+r.URL.Query().Get("n"))
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := range 3 {
		res, err := http.Get(srv.URL + "/x?n=1&a=2")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		t.Logf("%d %s %q X-Cache=%s Age=%s ETag=%s", i, res.Status, b, res.Header.Get("X-Cache"), res.Header.Get("Age"), res.Header.Get("Etag"))
	}
	if renders.Load() != 1 {
		t.Errorf("renders = %d", renders.Load())
	}
}
