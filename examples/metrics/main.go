// Command metrics serves pages behind the caching middleware, a value
// cache and a lock, all three counted by stampedeprom, and exposes the
// counts at /metrics for Prometheus.
//
//	go run ./examples/metrics                 # embedded server, 127.0.0.1:8080
//	REDIS_URL=redis://127.0.0.1:PORT go run ./examples/metrics -addr 127.0.0.1:8081
//	go run ./examples/metrics -demo           # requests to itself, then reads /metrics
//
// Routes:
//
//	GET  /products/{id}   a page, ~50 ms to render, behind the middleware
//	GET  /price/{id}      a value through cache.GetOrLoad
//	POST /reindex         a job under a lock: 409 while another holds it
//	GET  /metrics         the metrics (promhttp)
//
// With -demo it serves on a free port, sends concurrent requests for one
// product (one render; the others wait for it and are answered HIT), a
// request with Authorization (BYPASS), price lookups (one load, then
// hits) and a reindex while the lock is held (409) and once it is free,
// then reads /metrics and checks that every one of them is counted there.
// It exits non-zero if one is not.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
	"github.com/hotkv/stampede/stampedeprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// renderTime is how long a product page takes to render: a slow query, in
// a real service.
const renderTime = 50 * time.Millisecond

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	demo := flag.Bool("demo", false, "serve on a free port, send requests, check /metrics, print what it shows and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addr, *demo); err != nil {
		fmt.Fprintln(os.Stderr, "metrics:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addr string, demo bool) error {
	rdb, url, closeAll, err := embedded.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	a, err := newApp(rdb)
	if err != nil {
		return err
	}
	defer a.close()

	if demo {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: a.routes(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	base := "http://" + ln.Addr().String()
	if demo {
		return runDemo(ctx, a, base)
	}
	if os.Getenv("REDIS_URL") == "" {
		fmt.Printf("embedded server %s (REDIS_URL is not set)\n", url)
	}
	fmt.Printf("listening on %s: try %s/products/1, %s/price/7, then %s/metrics\n", base, base, base, base)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return nil
	}
}

// app is the service: its cache, middleware and locks, each observed by
// the Metrics, which its own registry serves.
type app struct {
	reg   *prometheus.Registry
	cache *cache.Cache
	mw    *middleware.Middleware
	locks *lock.Client
}

func newApp(rdb *redis.Client) (*app, error) {
	reg := prometheus.NewRegistry() // in a service, often prometheus.DefaultRegisterer
	reg.MustRegister(collectors.NewGoCollector())
	m, err := stampedeprom.New(reg, nil)
	if err != nil {
		return nil, err
	}
	// One Cache for the pages and the prices; its Observer counts both,
	// labelled cache="shop". The middleware's Observer counts requests by
	// route, the lock Client's Observer the reindex lock.
	c, err := cache.New(rdb, &cache.Options{Namespace: "examples/metrics", Expiry: cache.ExpiryPolicy{Fresh: time.Minute}, Observer: m.CacheObserver("shop")})
	if err != nil {
		return nil, err
	}
	if err := m.CacheStats("shop", c); err != nil {
		c.Close()
		return nil, err
	}
	mw, err := middleware.New(c, &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: time.Minute}, Observer: m.MiddlewareObserver("pages")})
	if err != nil {
		c.Close()
		return nil, err
	}
	locks, err := lock.New(rdb, &lock.Options{Observer: m.LockObserver("jobs")})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &app{reg: reg, cache: c, mw: mw, locks: locks}, nil
}

func (a *app) close() { a.cache.Close() }

func (a *app) routes() http.Handler {
	r := chi.NewRouter()
	// The middleware on the route (r.With); on the router (r.Use) it
	// would work as well. Either way the metrics are labelled by chi's
	// route pattern, route="/products/{id}", never by a product's path.
	r.With(a.mw.Handler).Get("/products/{id}", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(renderTime):
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "product %s\n", chi.URLParam(r, "id"))
	})
	r.Get("/price/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := chi.URLParam(r, "id")
		p, err := cache.GetOrLoad(r.Context(), a.cache, "price:"+id, func(context.Context) (int, error) {
			return 100 + len(id), nil // a database query, in a real service
		})
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "%d\n", p)
	})
	r.Post("/reindex", func(w http.ResponseWriter, r *http.Request) {
		l, err := a.locks.Obtain(r.Context(), "examples/metrics:reindex", 10*time.Second)
		switch {
		case errors.Is(err, lock.ErrNotObtained):
			http.Error(w, "a reindex is running", http.StatusConflict)
			return
		case err != nil:
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		defer l.Release(context.WithoutCancel(r.Context()))
		fmt.Fprintln(w, "reindexed")
	})
	r.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{}))
	return r
}
