package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// concurrent is how many requests for one product the demo sends at once.
const concurrent = 20

// runDemo sends requests to the app at base, then reads its /metrics
// until every request is counted there (the middleware reports a request
// after its response), and prints what it shows.
func runDemo(ctx context.Context, a *app, base string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	xcache := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, concurrent)
	for range concurrent {
		wg.Go(func() {
			resp, err := do(ctx, http.MethodGet, base+"/products/1", nil)
			if err != nil {
				errs <- err
				return
			}
			mu.Lock()
			xcache[resp.Header.Get("X-Cache")]++
			mu.Unlock()
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	fmt.Printf("%d concurrent requests for /products/1: X-Cache %v\n", concurrent, xcache)

	if resp, err := do(ctx, http.MethodGet, base+"/products/1", http.Header{"Authorization": {"Bearer demo"}}); err != nil {
		return err
	} else {
		fmt.Println("with Authorization: X-Cache", resp.Header.Get("X-Cache"))
	}
	for range 5 {
		if _, err := do(ctx, http.MethodGet, base+"/price/7", nil); err != nil {
			return err
		}
	}
	fmt.Println("5 requests for /price/7")

	// The reindex lock, held here as another instance would hold it.
	held, err := a.locks.Obtain(ctx, "examples/metrics:reindex", 10*time.Second)
	if err != nil {
		return err
	}
	resp, err := do(ctx, http.MethodPost, base+"/reindex", nil)
	if err != nil {
		return err
	}
	fmt.Println("reindex while the lock is held:", resp.Status)
	if err := held.Release(ctx); err != nil {
		return err
	}
	if resp, err = do(ctx, http.MethodPost, base+"/reindex", nil); err != nil {
		return err
	}
	fmt.Println("reindex once it is free:", resp.Status)

	products := []string{"middleware", "pages", "route", "/products/{id}"}
	want := []struct {
		series string
		value  float64
	}{
		{series("stampede_middleware_events_total", append(products, "event", "miss", "reason", "")...), 1},
		{series("stampede_middleware_events_total", append(products, "event", "hit", "reason", "")...), concurrent - 1},
		{series("stampede_middleware_events_total", append(products, "event", "bypass", "reason", "authorization")...), 1},
		// One load for the page, one for the price; each reports the
		// requests of this process it answered.
		{series("stampede_cache_load_duration_seconds_count", "cache", "shop", "result", "ok"), 2},
		{series("stampede_cache_load_callers_count", "cache", "shop"), 2},
		{series("stampede_lock_events_total", "event", "obtained", "lock", "jobs"), 2},
		{series("stampede_lock_events_total", "event", "not-obtained", "lock", "jobs"), 1},
		{series("stampede_lock_events_total", "event", "released", "lock", "jobs"), 2},
	}
	var got map[string]float64
	for {
		if got, err = scrape(ctx, base+"/metrics"); err != nil {
			return err
		}
		missing := ""
		for _, w := range want {
			if got[w.series] != w.value {
				missing = fmt.Sprintf("%s is %v, want %v", w.series, got[w.series], w.value)
				break
			}
		}
		if missing == "" {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("/metrics: %s", missing)
		case <-time.After(20 * time.Millisecond): // the middleware reports after the response
		}
	}
	fmt.Println("\nGET /metrics (stampede series that are not 0, histogram buckets left out):")
	var lines []string
	for s, v := range got {
		if strings.HasPrefix(s, "stampede_") && v != 0 && !strings.Contains(s, "_bucket{") {
			lines = append(lines, fmt.Sprintf("  %s %v", s, v))
		}
	}
	sort.Strings(lines)
	fmt.Println(strings.Join(lines, "\n"))
	fmt.Printf("\n/metrics counted every request: 1 render for %d concurrent requests (%d HIT), 1 BYPASS, 2 loads, 1 contended lock\n",
		concurrent, concurrent-1)
	// Those that came after the page was stored were hits, not answered
	// by its load: how many did depends on timing.
	fmt.Printf("the 2 loads answered %v requests (stampede_cache_served_total; sum it over the instances and divide by the loads for callers per load)\n",
		got[series("stampede_cache_served_total", "cache", "shop")])
	return nil
}

// do sends a request and reads its response.
func do(ctx context.Context, method, url string, h http.Header) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return resp, err
}

// scrape reads the text exposition at url into values by series (the
// line before the value: name{labels}).
func scrape(ctx context.Context, url string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("GET %s: %q: %w", url, line, err)
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// series returns the exposition's name for a series: name and the label
// pairs kv, sorted by label name as the Prometheus client writes them.
func series(name string, kv ...string) string {
	pairs := make([]string, 0, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", kv[i], kv[i+1]))
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}
