package stampedeprom_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
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
	// stampede_cache_load_duration_seconds_count{cache="users",result="ok"} 1
}
