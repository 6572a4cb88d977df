package middleware_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
)

// BenchmarkWaiters_decode: n requests in one process wait for one render
// of a 512 KiB response. It reports the bytes the process allocates per
// waiter while they are answered (clients discard what they read): about
// one body each, whatever n, because each waiter of cache.GetOrLoad
// decodes its own copy of the shared flight's bytes (the cache gives every
// caller a value of its own). MiB/waiter staying near 0.5 as n grows is
// that cost; sharing one decoded response per process would make it fall
// as 1/n.
func BenchmarkWaiters_decode(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	body := bytes.Repeat([]byte("0123456789abcdef"), 512<<10/16)
	for _, n := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("waiters=%d", n), func(b *testing.B) {
			ctx := testContext(b, 5*time.Minute)
			var gate atomic.Pointer[chan struct{}]
			bed := newTestBed(b, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if g := gate.Load(); g != nil {
					block(ctx, *g)
				}
				_, _ = w.Write(body)
			}), &bedOptions{mw: &middleware.Options{StoreLimit: 1 << 20}})
			bed.client.Transport.(*http.Transport).MaxIdleConnsPerHost = n
			discard := func(path string) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, bed.srv.URL+path, nil)
				if err != nil {
					return err
				}
				res, err := bed.client.Do(req)
				if err != nil {
					return err
				}
				defer res.Body.Close()
				m, err := io.Copy(io.Discard, res.Body)
				if err == nil && m != int64(len(body)) {
					err = fmt.Errorf("%s: %d bytes, want %d", path, m, len(body))
				}
				return err
			}
			var allocated uint64
			var before, after runtime.MemStats
			b.ResetTimer()
			for i := range b.N {
				path := fmt.Sprintf("/share/%d", i)
				release := make(chan struct{})
				gate.Store(&release)
				misses := bed.stats().Misses
				errs := make(chan error, n)
				for range n {
					go func() { errs <- discard(path) }()
				}
				redistest.WaitFor(b, ctx, "the waiters", func() bool { return bed.stats().Misses == misses+uint64(n) })
				runtime.ReadMemStats(&before)
				close(release)
				for range n {
					if err := redistest.Recv(b, ctx, errs, "a waiter"); err != nil {
						b.Fatal(err)
					}
				}
				runtime.ReadMemStats(&after)
				allocated += after.TotalAlloc - before.TotalAlloc
			}
			b.ReportMetric(float64(allocated)/float64(b.N)/float64(n)/(1<<20), "MiB/waiter")
		})
	}
}
