package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// renderTime is how long the report takes to render: a slow query, in a
// real service.
const renderTime = 300 * time.Millisecond

// app is one instance: its handlers and what it counts.
type app struct {
	rdb   *redis.Client
	cache *cache.Cache
	mw    *middleware.Middleware
	name  string

	cachedRenders, uncachedRenders string // counter keys on the server, shared by all instances

	mu      sync.Mutex        // guards xcache
	xcache  map[string]uint64 // X-Cache values this instance answered GET /report with
	started time.Time
}

func newApp(rdb *redis.Client, cfg config) (*app, error) {
	c, err := cache.New(rdb, &cache.Options{Namespace: cfg.namespace})
	if err != nil {
		return nil, err
	}
	// The response's own Cache-Control (none here) would override TTL.
	m, err := middleware.New(c, &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: cfg.ttl}})
	if err != nil {
		c.Close()
		return nil, err
	}
	return &app{
		rdb: rdb, cache: c, mw: m, name: cfg.name,
		cachedRenders:   cfg.namespace + ":renders:report",
		uncachedRenders: cfg.namespace + ":renders:report-uncached",
		xcache:          map[string]uint64{},
		started:         time.Now(),
	}, nil
}

func (a *app) close() { a.cache.Close() }

func (a *app) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(a.servedBy)
	r.With(a.countXCache, a.mw.Handler).Get("/report", a.report(a.cachedRenders))
	r.Get("/report/uncached", a.report(a.uncachedRenders))
	r.Get("/stats", a.stats)
	return r
}

// servedBy names the instance that answered. It is set outside the cache
// middleware, so it is not stored with the response: a HIT says which
// instance served it, the body which one rendered it.
func (a *app) servedBy(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Served-By", a.name)
		next.ServeHTTP(w, r)
	})
}

// countXCache counts the X-Cache header the middleware (inside it) set.
// It only reads the header map after the response went out.
func (a *app) countXCache(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r)
		if v := w.Header().Get("X-Cache"); v != "" {
			a.mu.Lock()
			a.xcache[v]++
			a.mu.Unlock()
		}
	})
}

// Report is the expensive answer.
type Report struct {
	Region     string    `json:"region"`
	Render     int64     `json:"render"` // which render of this endpoint, over all instances
	RenderedBy string    `json:"rendered_by"`
	RenderedAt time.Time `json:"rendered_at"`
	Rows       []Row     `json:"rows"`
}

// Row is one line of the report.
type Row struct {
	Product string `json:"product"`
	Units   int    `json:"units"`
	Revenue int    `json:"revenue_cents"`
}

func knownRegion(r string) bool { return r == "eu" || r == "us" || r == "apac" }

// report renders the report for ?region= (default eu), counting the render
// on the server under counter.
func (a *app) report(counter string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		region := r.URL.Query().Get("region")
		if region == "" {
			region = "eu"
		}
		if !knownRegion(region) {
			// A 404 is stored too (briefly, by the TTL): unknown regions
			// cannot be used to force renders.
			http.Error(w, "unknown region "+region, http.StatusNotFound)
			return
		}
		n, err := a.rdb.Incr(r.Context(), counter).Result()
		if err != nil {
			// 5xx responses are never stored.
			http.Error(w, "count render: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		// The render does not stop when this client leaves: with the
		// middleware, requests in every instance may be waiting for it.
		time.Sleep(renderTime)
		rep := Report{Region: region, Render: n, RenderedBy: a.name, RenderedAt: time.Now().UTC().Truncate(time.Millisecond), Rows: rows(region)}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rep)
	}
}

// rows is made-up data, the same for a region on every instance.
func rows(region string) []Row {
	var out []Row
	for _, p := range []string{"anvil", "rocket skates", "giant magnet"} {
		h := fnv.New32a()
		h.Write([]byte(region + "/" + p))
		v := int(h.Sum32())
		out = append(out, Row{Product: p, Units: 100 + v%900, Revenue: (100 + v%900) * (999 + v%5000)})
	}
	return out
}

// Stats is what GET /stats answers.
type Stats struct {
	Instance string `json:"instance"`
	Uptime   string `json:"uptime"`
	// Renders counts renders on the server: those of every instance.
	Renders map[string]int64 `json:"renders"`
	// XCache counts the X-Cache values this instance answered GET /report
	// with.
	XCache map[string]uint64 `json:"x_cache"`
	// Cache is this instance's cache.Stats.
	Cache cache.Stats `json:"cache"`
}

func (a *app) stats(w http.ResponseWriter, r *http.Request) {
	s := Stats{Instance: a.name, Uptime: time.Since(a.started).Round(time.Second).String(), Renders: map[string]int64{}, XCache: map[string]uint64{}}
	for route, key := range map[string]string{"/report": a.cachedRenders, "/report/uncached": a.uncachedRenders} {
		n, err := a.rdb.Get(r.Context(), key).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			http.Error(w, fmt.Sprintf("read %s: %v", key, err), http.StatusServiceUnavailable)
			return
		}
		s.Renders[route] = n
	}
	a.mu.Lock()
	for k, v := range a.xcache {
		s.XCache[k] = v
	}
	a.mu.Unlock()
	s.Cache = a.cache.Stats()
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s)
}

// sortedCounts formats counts as "HIT=99 MISS=1", largest first.
func sortedCounts(m map[string]uint64) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	out := ""
	for _, k := range keys {
		if out != "" {
			out += " "
		}
		out += fmt.Sprintf("%s=%d", k, m[k])
	}
	if out == "" {
		return "-"
	}
	return out
}
