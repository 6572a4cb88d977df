// Command proxy is a caching reverse proxy: the middleware in front of
// net/http/httputil.ReverseProxy, so any origin gets a shared HTTP cache
// whose renders are coalesced across every proxy instance that shares the
// server.
//
//	go run ./examples/proxy -origin http://127.0.0.1:8000            # embedded server, 127.0.0.1:8080
//	go run ./examples/proxy -origin http://app:8000 -redis redis://127.0.0.1:6379/0 -listen :9000
//
// It starts from middleware.SharedOptions(), the shared-cache preset: a
// response is stored only when it says how long it is fresh
// (Cache-Control max-age or s-maxage, or Expires) or has a Last-Modified
// that gives it a tenth of the time since then (at most -heuristic-max,
// RFC 9111 4.2.2), the origin's Surrogate-Control is honoured, no-cache
// responses with a validator are stored to be revalidated on every use, a
// client's no-cache forces a render and requests with cookies are cached.
// -shared=false starts from the middleware's defaults instead, as inside an
// application (every storable response is stored for -ttl). The flags
// -explicit, -heuristic, -surrogate-control, -revalidate-no-cache,
// -allow-no-cache and -cache-cookies change one field of either. A stored
// response with the origin's ETag or Last-Modified is revalidated once
// stale (If-None-Match / If-Modified-Since, and a 304 freshens it). A
// response the origin sends without Content-Length (chunked, which
// ReverseProxy flushes after every write) is stored like any other: the
// flushes are hints; event streams (text/event-stream) and responses that
// cannot be stored stream through as the origin writes them.
// scripts/cache-tests.sh runs the public HTTP cache test suite through
// this proxy.
package main

import (
	"context"
	"crypto/subtle"
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
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

type config struct {
	origin, listen, redisURL, namespace string
	opts                                middleware.Options // without Logger
	debug, purge                        bool
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		os.Exit(2) // the flag package has said why
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		os.Exit(1)
	}
}

// parseFlags reads the command line: the middleware's Options are
// SharedOptions (or with -shared=false the defaults) with the fields the
// flags name changed, in whichever order they come.
func parseFlags(args []string) (config, error) {
	var cfg config
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	fs.StringVar(&cfg.origin, "origin", "", "URL of the origin server (required), e.g. http://127.0.0.1:8000")
	fs.StringVar(&cfg.listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&cfg.redisURL, "redis", "", "Redis URL shared by the proxy instances (default: REDIS_URL, else an embedded server)")
	fs.StringVar(&cfg.namespace, "namespace", "proxy", "cache namespace; instances in front of the same origin share it")
	shared := fs.Bool("shared", true, "start from middleware.SharedOptions(), the shared-cache preset; false: from the middleware's defaults, as inside an application")
	ttl := fs.Duration("ttl", time.Minute, "freshness of a stored response that does not state its own (without -explicit)")
	staleTTL := fs.Duration("stale-ttl", 0, "how long after that a response may be served stale while one request refreshes it")
	heuristicMax := fs.Duration("heuristic-max", 24*time.Hour, "the longest freshness -heuristic gives")
	var changes []func(*middleware.Options)
	field := func(name, usage string, f func(*middleware.Options) *bool) {
		fs.BoolFunc(name, usage+" (preset: on; defaults: off)", func(v string) error {
			on, err := strconv.ParseBool(v)
			changes = append(changes, func(o *middleware.Options) { *f(o) = on })
			return err
		})
	}
	fs.Func("stale-if-error", "how long past its freshness a stored response answers when its refresh fails: a 5xx, an origin that refused or closed the connection (preset: 10m; 0: off)", func(v string) error {
		d, err := time.ParseDuration(v)
		changes = append(changes, func(o *middleware.Options) { o.Freshness.StaleIfError = d })
		return err
	})
	field("explicit", "store only responses with explicit freshness (max-age, s-maxage or Expires)", func(o *middleware.Options) *bool { return &o.Freshness.Explicit })
	fs.Func("heuristic", "fraction of the time since Last-Modified a response without explicit freshness is fresh (preset: 0.1; 0: off)", func(v string) error {
		f, err := strconv.ParseFloat(v, 64)
		changes = append(changes, func(o *middleware.Options) { o.Freshness.Heuristic = f })
		return err
	})
	fs.Func("targeted", "comma-separated targeted cache-control fields (RFC 9213) to obey before Cache-Control, first first (preset: CDN-Cache-Control; \"\": none)", func(v string) error {
		names := splitList(v)
		changes = append(changes, func(o *middleware.Options) { o.Targeted = names })
		return nil
	})
	fs.Func("tags", "comma-separated response fields that tag pages for purging, removed from what clients get (preset: Surrogate-Key,Cache-Tag; \"\": none)", func(v string) error {
		names := splitList(v)
		changes = append(changes, func(o *middleware.Options) { o.Tags.Headers = names })
		return nil
	})
	fs.BoolVar(&cfg.purge, "purge", false, "accept PURGE requests (of a URL, or of the tags their Surrogate-Key or Cache-Tag lists) whose X-Purge-Key header is the secret in the environment variable PURGE_KEY")
	field("surrogate-control", "honour the origin's Surrogate-Control (max-age, no-store) before Cache-Control's freshness", func(o *middleware.Options) *bool { return &o.SurrogateControl })
	field("revalidate-no-cache", "store responses with Cache-Control: no-cache and an ETag or Last-Modified, revalidated with the origin on every use", func(o *middleware.Options) *bool { return &o.Freshness.RevalidateNoCache })
	field("allow-no-cache", "let a request's Cache-Control: no-cache force a new render (anybody can then force renders)", func(o *middleware.Options) *bool { return &o.AllowNoCache })
	field("cache-cookies", "cache requests that carry a Cookie header (only if the origin never personalises by cookie without Vary)", func(o *middleware.Options) *bool { return &o.CacheRequestsWithCookies })
	fs.BoolVar(&cfg.debug, "debug", false, "log why requests bypassed the cache and responses were not stored")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if *shared {
		cfg.opts = *middleware.SharedOptions()
	}
	cfg.opts.Freshness.Fresh, cfg.opts.Freshness.Stale, cfg.opts.Freshness.HeuristicMaxAge = *ttl, *staleTTL, *heuristicMax
	for _, change := range changes {
		change(&cfg.opts)
	}
	if cfg.purge {
		key := os.Getenv("PURGE_KEY")
		if key == "" {
			return cfg, errors.New("-purge: set the environment variable PURGE_KEY to the secret a PURGE request must send in X-Purge-Key")
		}
		cfg.opts.Purge = &middleware.PurgePolicy{Authorize: func(r *http.Request) bool {
			vs := r.Header.Values("X-Purge-Key") // exactly one line: a second is no second chance
			return len(vs) == 1 && subtle.ConstantTimeCompare([]byte(vs[0]), []byte(key)) == 1
		}}
	}
	return cfg, nil
}

// splitList splits a comma-separated flag value, dropping empty names.
func splitList(v string) []string {
	var names []string
	for n := range strings.SplitSeq(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names
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
	opts := cfg.opts
	if cfg.debug {
		opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	m, err := middleware.New(c, &opts)
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
