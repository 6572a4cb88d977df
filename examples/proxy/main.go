// Command proxy is a caching reverse proxy: the middleware in front of
// net/http/httputil.ReverseProxy, so any origin gets a shared HTTP cache
// whose renders are coalesced across every proxy instance that shares the
// server.
//
//	go run ./examples/proxy -origin http://127.0.0.1:8000            # embedded server, :8080
//	go run ./examples/proxy -origin http://app:8000 -redis redis://127.0.0.1:6379/0 -listen :9000
//
// With -explicit (the default) a response is stored only when it says how
// long it is fresh (Cache-Control max-age or s-maxage, or Expires), as a
// shared cache in front of an origin usually is configured; -explicit=false
// stores every storable response for -ttl, as the middleware does inside
// an application. -heuristic 0.1 gives a response without explicit
// freshness but with Last-Modified a tenth of the time since then (at most
// -heuristic-max), as the published shared caches do (RFC 9111 4.2.2).
// A stored response with the origin's ETag or Last-Modified is revalidated
// once stale (If-None-Match / If-Modified-Since, and a 304 freshens it);
// -revalidate-no-cache also stores no-cache responses, revalidated on
// every use.
// scripts/cache-tests.sh runs the public HTTP cache test
// suite through this proxy.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/embedded"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

type config struct {
	origin, listen, redisURL, namespace string
	ttl, staleTTL, heuristicMax         time.Duration
	heuristic                           float64
	explicit, allowNoCache, cookies     bool
	surrogate, revalidateNoCache        bool
	debug                               bool
}

func main() {
	var cfg config
	flag.StringVar(&cfg.origin, "origin", "", "URL of the origin server (required), e.g. http://127.0.0.1:8000")
	flag.StringVar(&cfg.listen, "listen", "127.0.0.1:8080", "address to listen on")
	flag.StringVar(&cfg.redisURL, "redis", "", "Redis URL shared by the proxy instances (default: REDIS_URL, else an embedded server)")
	flag.StringVar(&cfg.namespace, "namespace", "proxy", "cache namespace; instances in front of the same origin share it")
	flag.DurationVar(&cfg.ttl, "ttl", time.Minute, "freshness of a stored response that does not state its own (with -explicit=false)")
	flag.DurationVar(&cfg.staleTTL, "stale-ttl", 0, "how long after that a response may be served stale while one request refreshes it")
	flag.BoolVar(&cfg.explicit, "explicit", true, "store only responses with explicit freshness (max-age, s-maxage or Expires)")
	flag.Float64Var(&cfg.heuristic, "heuristic", 0, "fraction of the time since Last-Modified a response without explicit freshness is fresh (0.1 is usual; 0: off)")
	flag.DurationVar(&cfg.heuristicMax, "heuristic-max", 24*time.Hour, "the longest freshness -heuristic gives")
	flag.BoolVar(&cfg.surrogate, "surrogate-control", false, "honour the origin's Surrogate-Control (max-age, no-store) before Cache-Control's freshness")
	flag.BoolVar(&cfg.revalidateNoCache, "revalidate-no-cache", false, "store responses with Cache-Control: no-cache and an ETag or Last-Modified, revalidated with the origin on every use")
	flag.BoolVar(&cfg.allowNoCache, "allow-no-cache", false, "let a request's Cache-Control: no-cache force a new render (anybody can then force renders)")
	flag.BoolVar(&cfg.cookies, "cache-cookies", false, "cache requests that carry a Cookie header (only if the origin never personalises by cookie without Vary)")
	flag.BoolVar(&cfg.debug, "debug", false, "log why requests bypassed the cache and responses were not stored")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	origin, err := url.Parse(cfg.origin)
	if err != nil || origin.Scheme == "" || origin.Host == "" {
		return fmt.Errorf("-origin %q: want an absolute URL such as http://127.0.0.1:8000", cfg.origin)
	}
	if cfg.redisURL != "" {
		os.Setenv("REDIS_URL", cfg.redisURL) // embedded.Open connects to it instead of starting a server
	}
	rdb, redisURL, closeRedis, err := embedded.Open(ctx)
	if err != nil {
		return err
	}
	defer closeRedis()
	h, closeCache, err := handler(rdb, origin, cfg)
	if err != nil {
		return err
	}
	defer closeCache()

	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	fmt.Printf("proxy: http://%s -> %s, cache on %s\n", ln.Addr(), origin, embedded.Redacted(redisURL))
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// handler is the middleware in front of a reverse proxy to origin.
func handler(rdb redis.UniversalClient, origin *url.URL, cfg config) (http.Handler, func(), error) {
	c, err := cache.New(rdb, &cache.Options{Namespace: cfg.namespace})
	if err != nil {
		return nil, nil, err
	}
	opts := &middleware.Options{
		TTL:                      cfg.ttl,
		StaleTTL:                 cfg.staleTTL,
		ExplicitFreshness:        cfg.explicit,
		HeuristicFreshness:       cfg.heuristic,
		HeuristicMaxAge:          cfg.heuristicMax,
		SurrogateControl:         cfg.surrogate,
		RevalidateNoCache:        cfg.revalidateNoCache,
		AllowNoCache:             cfg.allowNoCache,
		CacheRequestsWithCookies: cfg.cookies,
	}
	if cfg.debug {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := middleware.New(c, opts)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(origin)
			r.SetXForwarded()
		},
		ErrorLog: nil,
	}
	return m.Handler(rp), func() { c.Close() }, nil
}
