package stampedeprom_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
	"github.com/hotkv/stampede/stampedeprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// A cache counted by the Metrics, which /metrics serves. In a service the
// registry is usually prometheus.DefaultRegisterer and the handler
// promhttp.Handler().
func Example() {
	mr, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	defer mr.Close()

	reg := prometheus.NewRegistry()
	m, err := stampedeprom.New(reg, nil)
	if err != nil {
		panic(err)
	}
	c, err := cache.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), &cache.Options{
		Observer: m.CacheObserver("users"),
	})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	if err := m.CacheStats("users", c); err != nil {
		panic(err)
	}

	ctx := context.Background()
	for range 3 { // a miss and its load, then two hits
		_, _ = cache.GetOrLoad(ctx, c, "user:42", func(context.Context) (string, error) { return "Ada", nil })
	}

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		l := lines.Text()
		if strings.HasPrefix(l, "stampede_cache_events_total") && !strings.HasSuffix(l, " 0") ||
			strings.HasPrefix(l, "stampede_cache_load_duration_seconds_count") && !strings.HasSuffix(l, " 0") {
			fmt.Println(l)
		}
	}
	// Output:
	// stampede_cache_events_total{cache="users",event="hit",tier="server"} 2
	// stampede_cache_events_total{cache="users",event="load",tier=""} 1
	// stampede_cache_events_total{cache="users",event="miss",tier=""} 1
	// stampede_cache_events_total{cache="users",event="served",tier=""} 1
	// stampede_cache_load_duration_seconds_count{cache="users",result="ok"} 1
}

func showUser(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, chi.URLParam(r, "id")) }

// The snippet of docs/observability.md (docs_test.go checks it): a cache,
// a lock client and a middleware counted, and /metrics. Compiled, not run:
// it connects to a server on localhost:6379.
func Example_service() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	m, err := stampedeprom.New(prometheus.DefaultRegisterer, nil) // or &stampedeprom.Options{Namespace, Buckets, MaxRoutes}
	if err != nil {
		log.Fatal(err)
	}
	c, err := cache.New(rdb, &cache.Options{Observer: m.CacheObserver("users")})
	if err != nil {
		log.Fatal(err)
	}
	// Coalesced calls, waits, contention, near-cache size: read at each scrape.
	if err := m.CacheStats("users", c); err != nil {
		log.Fatal(err)
	}
	locks, err := lock.New(rdb, &lock.Options{Observer: m.LockObserver("jobs")})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := middleware.New(c, &middleware.Options{Observer: m.MiddlewareObserver("pages")})
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.With(mw.Handler).Get("/users/{id}", showUser) // on the route: the route label is "/users/{id}"
	r.Handle("/metrics", promhttp.Handler())
	_ = locks // every Obtain, Release, Do of these locks is counted
	log.Fatal(http.ListenAndServe(":8080", r))
}
