package middleware_test

import (
	"bytes"
	"context"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
)

// benchParallelism multiplies GOMAXPROCS into the number of client
// goroutines: with one request in flight per core, a cache hit's Redis
// round trip would leave the CPUs idle and measure latency, not
// throughput.
const benchParallelism = 8

// benchRows is how many rows the benchmark page renders: about 200µs of
// html/template work on a current core (the run logs the measured time).
const benchRows = 36

// BenchmarkResponseCache compares, in one run, the requests per second of
// one endpoint whose handler does a fixed amount of CPU work (rendering a
// template), answered over real HTTP with keep-alive:
//
//   - uncached: the handler on every request;
//   - syncmap: a hand-written in-process cache, a sync.Map from URL to
//     status, headers and body, the usual first attempt (one process
//     only, no expiry beyond a TTL, no Cache-Control, no stampede
//     protection);
//   - stampede: middleware.Cache over a real Redis 8, every request a hit
//     (one GET, a msgpack decode and the response write);
//   - stampede-near: the same with the cache's near cache on
//     (cache.Options.Near), every request a hit from process memory
//     (no round trip, no decode), kept coherent by CLIENT TRACKING.
//
// Compare req/s; renders/op says how often the handler ran and
// nonhits/op how many answers were not cache hits; x-syncmap is
// stampede-near's ratio to syncmap. On a machine shared with other work
// req/s also depends on how much CPU the process got (cores): cpu-µs/op
// is the process's CPU time per request (client and server together;
// not the Redis server's) and x-syncmap-cpu syncmap's over
// stampede-near's. The ratios to uncached are logged at the end.
func BenchmarkResponseCache(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	ns := "bench" + strings.ReplaceAll(redistest.Key(b, "")[len("test:"):], "/", ".")
	c, err := cache.New(s.Client(b), &cache.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	// The same namespace with a near cache, on a client of its own.
	nc := benchNearCache(b, s, ns)

	var renders atomic.Int64
	page := benchPage(&renders)
	b.Logf("the handler alone: %v per render (%d rows, median of 200)", benchRenderTime(page), benchRows)

	cases := []struct {
		name    string
		handler http.Handler
		cached  bool
	}{
		{"uncached", page, false},
		{"syncmap", &benchMapCache{next: page, ttl: time.Hour}, true},
		{"stampede", middleware.Cache(c, time.Hour)(page), true},
		{"stampede-near", middleware.Cache(nc, time.Hour)(page), true},
	}
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        4 * benchParallelism * runtime.GOMAXPROCS(0),
		MaxIdleConnsPerHost: 2 * benchParallelism * runtime.GOMAXPROCS(0),
	}}
	b.Cleanup(client.CloseIdleConnections)

	reqPerSec := map[string]float64{} // of each case's last (longest) run
	cpuPerReq := map[string]float64{} // µs of the process's CPU time per request, likewise
	for _, tc := range cases {
		srv := httptest.NewServer(tc.handler)
		b.Cleanup(srv.Close)
		url := srv.URL + "/report?region=eu&year=2026"
		b.Run(tc.name, func(b *testing.B) {
			// The connections of the cases before are closed: idle,
			// they would count against MaxIdleConns, and a later case
			// would open and close connections as it went.
			client.CloseIdleConnections()
			// Fill the cache (if any) and learn the body's length, which
			// every answer is checked against.
			want, _, err := benchGet(client, url)
			if err != nil {
				b.Fatal(err)
			}
			renders.Store(0)
			near := nc.Stats().NearHits
			var nonHits atomic.Int64
			b.ReportAllocs()
			b.SetParallelism(benchParallelism)
			cpu0 := processCPU()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n, xcache, err := benchGet(client, url)
					if err != nil {
						b.Error(err) // not Fatal: this is not the benchmark's goroutine
						return
					}
					if n != want {
						b.Errorf("body of %d bytes, want %d", n, want)
						return
					}
					if xcache != "HIT" {
						nonHits.Add(1)
					}
				}
			})
			b.StopTimer()
			rps := float64(b.N) / b.Elapsed().Seconds()
			reqPerSec[tc.name] = rps
			b.ReportMetric(rps, "req/s")
			// On a shared machine req/s also says how much CPU the
			// process got; the CPU time per request (client and server:
			// they share the process) does not.
			if cpu := processCPU() - cpu0; cpu > 0 {
				perReq := float64(cpu) / float64(time.Microsecond) / float64(b.N)
				cpuPerReq[tc.name] = perReq
				b.ReportMetric(perReq, "cpu-µs/op")
				b.ReportMetric(float64(cpu)/float64(b.Elapsed()), "cores")
				if m := cpuPerReq["syncmap"]; m > 0 && tc.name == "stampede-near" {
					b.ReportMetric(m/perReq, "x-syncmap-cpu") // syncmap's CPU per request over ours
				}
			}
			if base := reqPerSec["uncached"]; base > 0 && tc.name != "uncached" {
				b.ReportMetric(rps/base, "x-uncached")
			}
			if tc.name == "stampede-near" {
				b.ReportMetric(float64(nc.Stats().NearHits-near)/float64(b.N), "near/op")
				if m := reqPerSec["syncmap"]; m > 0 {
					b.ReportMetric(rps/m, "x-syncmap") // the target of issue 12: >= 0.9
				}
			}
			b.ReportMetric(float64(renders.Load())/float64(b.N), "renders/op")
			if tc.cached {
				b.ReportMetric(float64(nonHits.Load())/float64(b.N), "nonhits/op")
			}
		})
	}

	if m, n := reqPerSec["syncmap"], reqPerSec["stampede-near"]; m > 0 && n > 0 {
		b.Logf("stampede-near %.0f req/s = %.2fx syncmap %.0f req/s; CPU per request %.1fµs, syncmap %.1fµs (%.2fx)",
			n, n/m, m, cpuPerReq["stampede-near"], cpuPerReq["syncmap"], cpuPerReq["syncmap"]/cpuPerReq["stampede-near"])
	}
	base := reqPerSec["uncached"]
	if base == 0 {
		return // filtered out by -bench
	}
	var lines []string
	for _, tc := range cases {
		if rps, ok := reqPerSec[tc.name]; ok {
			lines = append(lines, fmt.Sprintf("%s %.0f req/s = %.2fx uncached", tc.name, rps, rps/base))
		}
	}
	b.Log(strings.Join(lines, "; "))
}

// benchGet fetches url, reading the whole body so that the connection is
// reused, and returns the body's length and the X-Cache header.
func benchGet(client *http.Client, url string) (int64, string, error) {
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err != nil {
		return 0, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return n, resp.Header.Get("X-Cache"), nil
}

// benchReport is the data the page renders.
type benchReport struct {
	Region string
	Year   string
	Rows   []benchRow
}

type benchRow struct {
	SKU, Product string
	Units        int
	Revenue      float64
	Share        float64
}

const benchTemplate = `<!doctype html>
<title>Sales {{.Region}} {{.Year}}</title>
<h1>Sales in {{.Region}}, {{.Year}}</h1>
<table>
<tr><th>SKU<th>Product<th>Units<th>Revenue<th>Share</tr>
{{range .Rows}}<tr><td>{{.SKU}}<td>{{.Product}}<td>{{.Units}}<td>{{printf "%.2f" .Revenue}}<td>{{printf "%.1f%%" .Share}}</tr>
{{end}}</table>
`

// benchPage is the expensive handler: it builds benchRows rows and renders
// them with html/template (escaping every field), counting its renders.
func benchPage(renders *atomic.Int64) http.Handler {
	tmpl := template.Must(template.New("report").Parse(benchTemplate))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders.Add(1)
		q := r.URL.Query()
		rep := benchReport{Region: q.Get("region"), Year: q.Get("year"), Rows: make([]benchRow, benchRows)}
		total := 0.0
		for i := range rep.Rows {
			units := (i*7919)%500 + 1
			rep.Rows[i] = benchRow{
				SKU: fmt.Sprintf("SKU-%05d", i), Product: fmt.Sprintf("Product <%d> & co", i),
				Units: units, Revenue: float64(units) * 19.99,
			}
			total += rep.Rows[i].Revenue
		}
		for i := range rep.Rows {
			rep.Rows[i].Share = 100 * rep.Rows[i].Revenue / total
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := tmpl.Execute(w, rep); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	})
}

// benchRenderTime is the median time of one render of page, called
// directly, without HTTP.
func benchRenderTime(page http.Handler) time.Duration {
	r := httptest.NewRequest(http.MethodGet, "/report?region=eu&year=2026", nil)
	times := make([]time.Duration, 200)
	for i := range times {
		w := httptest.NewRecorder()
		start := time.Now()
		page.ServeHTTP(w, r)
		times[i] = time.Since(start)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	return times[len(times)/2].Round(time.Microsecond)
}

// benchMapCache is the response cache people write by hand: a sync.Map
// from the URL to the recorded status, headers and body, with a TTL. It is
// safe for concurrent use, and has none of the middleware's rules: no
// stampede protection (concurrent misses all render), no Vary, no
// Cache-Control, no size limit, one process only.
type benchMapCache struct {
	next    http.Handler
	ttl     time.Duration
	entries sync.Map // URL string → *benchMapEntry
}

type benchMapEntry struct {
	status  int
	header  http.Header
	body    []byte
	expires time.Time
}

func (mc *benchMapCache) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	key := r.URL.String()
	if v, ok := mc.entries.Load(key); ok {
		if e := v.(*benchMapEntry); time.Now().Before(e.expires) {
			mc.write(w, e, "HIT")
			return
		}
	}
	rec := httptest.NewRecorder()
	mc.next.ServeHTTP(rec, r)
	e := &benchMapEntry{status: rec.Code, header: rec.Header().Clone(), body: rec.Body.Bytes(), expires: time.Now().Add(mc.ttl)}
	if e.status == http.StatusOK {
		mc.entries.Store(key, e)
	}
	mc.write(w, e, "MISS")
}

func (mc *benchMapCache) write(w http.ResponseWriter, e *benchMapEntry, status string) {
	h := w.Header()
	for k, vs := range e.header {
		h[k] = slices.Clone(vs)
	}
	h.Set("X-Cache", status)
	w.WriteHeader(e.status)
	_, _ = w.Write(e.body)
}

// BenchmarkHit is a hit of BenchmarkResponseCache without HTTP: the
// handler called directly with a recycled ResponseWriter, so that what is
// left is the cache's own cost per request (syncmap: a sync.Map lookup;
// stampede-near: the middleware's key, a near-cache lookup and the
// response's header copied out).
func BenchmarkHit(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	ns := "bench" + strings.ReplaceAll(redistest.Key(b, "")[len("test:"):], "/", ".")
	nc := benchNearCache(b, s, ns)
	var renders atomic.Int64
	page := benchPage(&renders)
	for _, tc := range []struct {
		name    string
		handler http.Handler
	}{
		{"syncmap", &benchMapCache{next: page, ttl: time.Hour}},
		{"stampede-near", middleware.Cache(nc, time.Hour)(page)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			r := httptest.NewRequest(http.MethodGet, "/report?region=eu&year=2026", nil)
			tc.handler.ServeHTTP(httptest.NewRecorder(), r) // fill
			before := nc.Stats().NearHits
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				w := &benchWriter{header: make(http.Header)}
				for pb.Next() {
					clear(w.header)
					tc.handler.ServeHTTP(w, r)
					if w.status != http.StatusOK {
						b.Errorf("status %d", w.status)
						return
					}
				}
			})
			if tc.name == "stampede-near" {
				b.ReportMetric(float64(nc.Stats().NearHits-before)/float64(b.N), "near/op")
			}
		})
	}
}

// benchWriter is a ResponseWriter that keeps the status and discards the
// body.
type benchWriter struct {
	header http.Header
	status int
}

func (w *benchWriter) Header() http.Header         { return w.header }
func (w *benchWriter) WriteHeader(code int)        { w.status = code }
func (w *benchWriter) Write(p []byte) (int, error) { return len(p), nil }

// benchNearCache returns a Cache with a near cache in namespace ns on a
// client of its own, once the near cache answers.
func benchNearCache(b *testing.B, s *redistest.Server, ns string) *cache.Cache {
	b.Helper()
	nc, err := cache.New(s.Client(b), &cache.Options{Namespace: ns, Near: &cache.Near{MaxEntries: 10_000}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nc.Close() })
	ctx, cancel := context.WithTimeout(b.Context(), 10*time.Second)
	defer cancel()
	redistest.WaitFor(b, ctx, "the near cache active", nc.NearActive)
	return nc
}

// BenchmarkCost measures, without the near cache, what two paths cost
// per request on a real Redis 8: a hit of a response that names Vary
// (vary-hit) next to one that does not (plain-hit), and a miss (each
// request a new URL, a render that costs almost nothing), so the
// server's round trips are what is measured. A Vary'd hit reads two
// entries (the URL's marker, then the variant) where a plain hit reads
// one; a miss answers once its render is stored, so that the next
// request finds it. Compare each with plain-hit in the same run.
func BenchmarkCost(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	ns := "bench" + strings.ReplaceAll(redistest.Key(b, "")[len("test:"):], "/", ".")
	c, err := cache.New(s.Client(b), &cache.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	var renders atomic.Int64
	small := func(vary bool) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			renders.Add(1)
			w.Header().Set("Content-Type", "text/plain")
			if vary {
				w.Header().Set("Vary", "Accept-Language")
			}
			_, _ = w.Write([]byte("hello, world: a small page of text"))
		})
	}
	run := func(b *testing.B, h http.Handler, url func(i int) string) {
		var seq atomic.Int64
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			w := &benchWriter{header: make(http.Header)}
			for pb.Next() {
				r, _ := http.NewRequest(http.MethodGet, url(int(seq.Add(1))), nil)
				r.Header.Set("Accept-Language", "nl")
				clear(w.header)
				h.ServeHTTP(w, r)
				if w.status != http.StatusOK {
					b.Errorf("status %d", w.status)
					return
				}
			}
		})
	}
	plain := middleware.Cache(c, time.Hour)(small(false))
	vary := middleware.Cache(c, time.Hour)(small(true))
	b.Run("plain-hit", func(b *testing.B) { run(b, plain, func(int) string { return "http://x/plain" }) })
	b.Run("vary-hit", func(b *testing.B) { run(b, vary, func(int) string { return "http://x/vary" }) })
	epoch := strconv.FormatInt(time.Now().UnixNano(), 36)
	b.Run("miss", func(b *testing.B) {
		run(b, plain, func(i int) string { return "http://x/miss/" + epoch + "/" + strconv.Itoa(i) })
	})
	b.Run("vary-miss", func(b *testing.B) {
		run(b, vary, func(i int) string { return "http://x/vmiss/" + epoch + "/" + strconv.Itoa(i) })
	})
}

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

// BenchmarkPurgeTag measures, in one run on Redis 8, the purge of a tag
// that 10,000 stored pages carry:
//
//   - purgetag: PurgeTag, one write of the tag's record, whatever the
//     number of pages;
//   - unlink-each: what a purge that keeps the pages of each tag in a
//     set on the server must do at least, the deletion of every page's
//     key (UNLINK, pipelined; without even reading the set).
//
// purge-µs/op is the purge's time, x-unlink unlink-each's over
// purgetag's (logged at the end); record-B is the server's MEMORY USAGE
// of the tag's record and tag-B/page how much larger a page's entry is
// with the tag than without. After the purges, a request for every page
// must be a miss (misses-after).
func BenchmarkPurgeTag(b *testing.B) {
	const pages = 10000
	s := redistest.Shared(b, redistest.Redis8)
	rc := s.Client(b)
	ctx := context.Background()
	ns := "benchpurge" + strings.ReplaceAll(redistest.Key(b, "")[len("test:"):], "/", ".")
	c, err := cache.New(rc, &cache.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	m, err := middleware.New(c, &middleware.Options{Tags: middleware.TagPolicy{Headers: []string{"Surrogate-Key"}}})
	if err != nil {
		b.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("tagged") != "no" {
			w.Header().Set("Surrogate-Key", "catalogue")
		}
		fmt.Fprintf(w, "page %s with a body of some length, as pages have", r.URL.Path)
	}))
	get := func(target string) string {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
		return w.Header().Get("X-Cache")
	}
	fill := func() {
		for i := range pages {
			get(fmt.Sprintf("/p/%d", i))
		}
	}
	keyOf := func(key string) string { return ns + ":{" + redisx.Tag(key) + "}" }
	page := func(target string) string { return keyOf("GET http://example.com" + target) }
	get("/size?tagged=no")
	get("/size?tagged=yes")
	untagged, _ := rc.StrLen(ctx, page("/size?tagged=no")).Result()
	tagged, _ := rc.StrLen(ctx, page("/size?tagged=yes")).Result()

	var purge, unlink float64
	b.Run("purgetag", func(b *testing.B) {
		fill()
		b.ResetTimer()
		for b.Loop() {
			if err := m.PurgeTag(ctx, "catalogue"); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		purge = float64(b.Elapsed().Microseconds()) / float64(b.N)
		b.ReportMetric(purge, "purge-µs/op")
		record, err := rc.MemoryUsage(ctx, keyOf("tag\ncatalogue")).Result()
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(record), "record-B")
		b.ReportMetric(float64(tagged-untagged), "tag-B/page")
		misses := 0
		for i := range pages {
			if get(fmt.Sprintf("/p/%d", i)) == "MISS" {
				misses++
			}
		}
		if misses != pages {
			b.Fatalf("%d of %d pages were misses after the purge", misses, pages)
		}
		b.ReportMetric(float64(misses), "misses-after")
	})
	b.Run("unlink-each", func(b *testing.B) {
		keys := make([]string, pages)
		for i := range keys {
			keys[i] = page(fmt.Sprintf("/p/%d", i))
		}
		val, err := rc.Get(ctx, keys[0]).Result()
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			b.StopTimer()
			pipe := rc.Pipeline()
			for _, k := range keys {
				pipe.Set(ctx, k, val, time.Hour)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			start := time.Now()
			pipe = rc.Pipeline()
			for _, k := range keys {
				pipe.Unlink(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			unlink += float64(time.Since(start).Microseconds())
		}
		unlink /= float64(b.N)
		b.ReportMetric(unlink, "purge-µs/op")
	})
	if purge > 0 && unlink > 0 {
		b.Logf("x-unlink: unlink-each takes %.0f× the time of purgetag (%.0f µs against %.0f µs) for %d pages", unlink/purge, unlink, purge, pages)
	}
}

// BenchmarkTaggedHit measures what a page's tag costs a hit on Redis 8:
// a tagged page's hit also reads its tag's record (tagged) next to one
// without tags (plain), from the server and, with the near cache, from
// process memory. Compare each tagged with its plain in the same run.
func BenchmarkTaggedHit(b *testing.B) {
	s := redistest.Shared(b, redistest.Redis8)
	ns := "benchtag" + strings.ReplaceAll(redistest.Key(b, "")[len("test:"):], "/", ".")
	c, err := cache.New(s.Client(b), &cache.Options{Namespace: ns})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	nc := benchNearCache(b, s, ns)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/tagged" {
			w.Header().Set("Surrogate-Key", "catalogue product-1")
		}
		fmt.Fprint(w, "a page")
	})
	for _, tier := range []struct {
		name string
		c    *cache.Cache
	}{{"server", c}, {"near", nc}} {
		m, err := middleware.New(tier.c, &middleware.Options{Tags: middleware.TagPolicy{Headers: []string{"Surrogate-Key"}}})
		if err != nil {
			b.Fatal(err)
		}
		mh := m.Handler(h)
		for _, path := range []string{"/plain", "/tagged"} {
			b.Run(tier.name+path, func(b *testing.B) {
				for range 3 { // stored, then in the near cache
					mh.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
				}
				misses := 0
				for b.Loop() {
					w := httptest.NewRecorder()
					mh.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
					if w.Header().Get("X-Cache") != "HIT" {
						misses++
					}
				}
				b.ReportMetric(float64(misses)/float64(b.N), "nonhits/op")
			})
		}
	}
}
