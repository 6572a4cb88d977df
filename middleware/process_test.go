package middleware_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// TestMain lets the test binary run again as one of workers (see
// redistest.Main): the worker processes of these tests.
func TestMain(m *testing.M) { redistest.Main(m, workers) }

var workers = map[string]func() int{"serve": workerServe, "serveGated": workerServeGated, "serveRevalidating": workerServeRevalidating, "serveTagged": workerServeTagged}

// workerServe runs the cached handler on a loopback port, prints "ready
// <url>" and serves until killed. Each render counts itself with INCR, so
// renders are counted across processes, and takes 100ms.
func workerServe() int {
	rc := redistest.WorkerClient()
	defer rc.Close()
	c, err := cache.New(rc, &cache.Options{Namespace: os.Getenv("MWTEST_NS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer c.Close()
	counter := os.Getenv("MWTEST_COUNTER")
	h := middleware.Cache(c, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc.Incr(r.Context(), counter)
		time.Sleep(100 * time.Millisecond) // the expensive render
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "report for %s rendered by pid %d", r.URL.Query().Get("region"), os.Getpid())
	}))
	return listenAndServe(h)
}

// TestMiddleware_oneRender_processes: concurrent requests spread over 4
// processes for one URL: the handler runs once in the whole cluster and
// every client gets that render.
func TestMiddleware_oneRender_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		const procs, perProc = 4, 32
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rc := s.Client(t)
		ns, counter := "mw"+strings.ReplaceAll(redistest.Key(t, "")[5:], "/", "."), redistest.Key(t, "renders")
		urls := spawnServers(t, ctx, s, procs, "serve", "MWTEST_NS="+ns, "MWTEST_COUNTER="+counter)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: perProc}}
		defer client.CloseIdleConnections()
		type answer struct {
			body, xcache string
			err          error
		}
		answers := make(chan answer, procs*perProc)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for _, u := range urls {
			for range perProc {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/report?region=eu", nil)
					req.Host = "reports.example" // one site behind a load balancer
					res, err := client.Do(req)
					if err != nil {
						answers <- answer{err: err}
						return
					}
					b, err := io.ReadAll(res.Body)
					res.Body.Close()
					answers <- answer{string(b), res.Header.Get("X-Cache"), err}
				}()
			}
		}
		close(start)
		wg.Wait()
		close(answers)
		bodies, statuses := tally(t, len(answers), func() (string, string, error) { a := <-answers; return a.body, a.xcache, a.err })
		renders := renderCount(t, ctx, rc, counter)
		if renders != 1 || len(bodies) != 1 {
			t.Errorf("%d renders, %d distinct bodies (%v); want one render served to all %d requests", renders, len(bodies), bodies, procs*perProc)
		}
		if statuses["BYPASS"] != 0 || statuses["MISS"] < 1 {
			t.Errorf("X-Cache counts %v: want MISS (and HIT), no BYPASS", statuses)
		}
	}, redistest.Redis8, redistest.Cluster, redistest.Valkey)
}

// workerServeGated is workerServe with a render the test holds: the first
// render (counted with INCR across processes) pushes to MWTEST_GATE
// ":started" and waits to pop from ":release", or gives up with a 503 when
// its request's context ends; for a request marked with firstHeader, the
// worker pushes to ":gone" when the server sees its client go. GET
// /_stats answers "misses waits" of the worker's cache, past the
// middleware.
func workerServeGated() int {
	rc := redistest.WorkerClient()
	defer rc.Close()
	c, err := cache.New(rc, &cache.Options{Namespace: os.Getenv("MWTEST_NS")})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer c.Close()
	counter, gate := os.Getenv("MWTEST_COUNTER"), os.Getenv("MWTEST_GATE")
	cached := middleware.Cache(c, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := rc.Incr(r.Context(), counter).Result()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if n == 1 {
			if err := rc.RPush(r.Context(), gate+":started", 1).Err(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if err := rc.BLPop(r.Context(), 20*time.Second, gate+":release").Err(); err != nil {
				http.Error(w, "gave up: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintf(w, "report %d rendered by pid %d", n, os.Getpid())
	}))
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_stats" {
			st := c.Stats()
			fmt.Fprintf(w, "%d %d", st.Misses, st.Waits)
			return
		}
		if r.Header.Get(firstHeader) != "" {
			stop := context.AfterFunc(r.Context(), func() {
				_ = rc.RPush(context.Background(), gate+":gone", 1).Err()
			})
			defer stop()
		}
		cached.ServeHTTP(w, r)
	})
	return listenAndServe(h)
}

// TestMiddleware_clientGone_processes: in 2 processes, 8 requests wait
// for the render of a ninth, whose client hangs up during the render
// (the handler gives up when its request's context ends). The render
// goes on all the same: it runs once in the cluster, every waiter gets it
// (HIT or MISS, never BYPASS), and it is stored.
func TestMiddleware_clientGone_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		const procs, waiters = 2, 8
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rc := s.Client(t)
		ns, counter, gate := "mw"+strings.ReplaceAll(redistest.Key(t, "")[5:], "/", "."), redistest.Key(t, "renders"), redistest.Key(t, "gate")
		urls := spawnServers(t, ctx, s, procs, "serveGated", "MWTEST_NS="+ns, "MWTEST_COUNTER="+counter, "MWTEST_GATE="+gate)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: waiters}}
		defer client.CloseIdleConnections()
		type answer struct {
			body, xcache string
			err          error
		}
		get := func(ctx context.Context, u string, hdr ...string) answer {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/report?region=eu", nil)
			req.Host = "reports.example"
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			res, err := client.Do(req)
			if err != nil {
				return answer{err: err}
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			return answer{string(b), res.Header.Get("X-Cache"), err}
		}
		pop := func(what, key string) {
			t.Helper()
			if err := rc.BLPop(ctx, 20*time.Second, key).Err(); err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
		}

		firstCtx, cancelFirst := context.WithCancel(ctx)
		defer cancelFirst()
		first := make(chan answer, 1)
		go func() { first <- get(firstCtx, urls[0], firstHeader, "1") }()
		pop("the render", gate+":started")

		answers := make(chan answer, waiters)
		for i := range waiters {
			go func() { answers <- get(ctx, urls[i%procs]) }()
		}
		// All waiting: in the first process on its flight, in the other
		// on its claim.
		redistest.WaitFor(t, ctx, "the waiters", func() bool {
			var misses, waits int
			for _, u := range urls {
				var m, w int
				res, err := client.Get(u + "/_stats")
				if err != nil {
					t.Fatal(err)
				}
				_, err = fmt.Fscan(res.Body, &m, &w)
				res.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				misses, waits = misses+m, waits+w
			}
			return misses == 1+waiters && waits == 1
		})
		cancelFirst()
		pop("the server to see the client go", gate+":gone")
		if err := rc.RPush(ctx, gate+":release", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if a := <-first; !errors.Is(a.err, context.Canceled) {
			t.Errorf("first request: %q %s, err %v; want it cancelled", a.body, a.xcache, a.err)
		}
		bodies, statuses := tally(t, waiters, func() (string, string, error) { a := <-answers; return a.body, a.xcache, a.err })
		renders := renderCount(t, ctx, rc, counter)
		if renders != 1 || len(bodies) != 1 || statuses["BYPASS"] != 0 {
			t.Errorf("%d renders, bodies %v, X-Cache %v; want one render given to all %d waiters, no BYPASS", renders, bodies, statuses, waiters)
		}
		for _, u := range urls {
			if a := get(ctx, u); a.err != nil || a.xcache != "HIT" || bodies[a.body] == 0 {
				t.Errorf("after: %q X-Cache %s, err %v; want a HIT of the one render", a.body, a.xcache, a.err)
			}
		}
	}, redistest.Redis8, redistest.Cluster)
}

// workerServeRevalidating serves /doc with a clock of its own (for the
// middleware and the cache) that POST /_advance?d=<duration> moves: every
// GET render counts itself with INCR (MWTEST_COUNTER) and answers
// "max-age=10, must-revalidate" with ETag "v1", a 304 to a request that
// sends it; the second render (the first revalidation) pushes to
// MWTEST_GATE ":started" and waits to pop from ":release". A POST of /doc
// is a write the handler answers 200, which invalidates /doc; it renders
// nothing the counter counts. GET /_stats answers "misses waits" of the
// worker's cache.
func workerServeRevalidating() int {
	rc := redistest.WorkerClient()
	defer rc.Close()
	clock := newSettableClock()
	c, err := cache.New(rc, &cache.Options{Namespace: os.Getenv("MWTEST_NS"), Now: clock.Now})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	defer c.Close()
	m, err := middleware.New(c, &middleware.Options{Now: clock.Now})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	counter, gate := os.Getenv("MWTEST_COUNTER"), os.Getenv("MWTEST_GATE")
	cached := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			fmt.Fprint(w, "written")
			return
		}
		n, err := rc.Incr(r.Context(), counter).Result()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if n == 2 {
			if err := rc.RPush(r.Context(), gate+":started", 1).Err(); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if err := rc.BLPop(r.Context(), 20*time.Second, gate+":release").Err(); err != nil {
				http.Error(w, "gave up: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.Header().Set("Cache-Control", "max-age=10, must-revalidate")
		w.Header().Set("Etag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprintf(w, "report %d rendered by pid %d", n, os.Getpid())
	}))
	return listenAndServe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/_stats":
			st := c.Stats()
			fmt.Fprintf(w, "%d %d", st.Misses, st.Waits)
		case "/_advance":
			d, err := time.ParseDuration(r.URL.Query().Get("d"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			clock.Advance(d)
		default:
			cached.ServeHTTP(w, r)
		}
	}))
}

// TestMiddleware_writeDuringRevalidation_processes: in 2 processes, 6
// requests wait for the one revalidation of a stored response (past its
// max-age, must-revalidate) when a
// write (a POST answered 200) invalidates it. The revalidation's result
// is not stored (the write wins), and the waiters go back to the key and
// share one render: 3 renders in all (the first, the revalidation, the
// one after the write), every waiter gets the render made after the
// write, none renders for itself (BYPASS). Before, each waiter rendered
// alone: 6 extra renders.
func TestMiddleware_writeDuringRevalidation_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		const procs, waiters = 2, 6
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rc := s.Client(t)
		ns, counter, gate := "mw"+strings.ReplaceAll(redistest.Key(t, "")[5:], "/", "."), redistest.Key(t, "renders"), redistest.Key(t, "gate")
		urls := spawnServers(t, ctx, s, procs, "serveRevalidating", "MWTEST_NS="+ns, "MWTEST_COUNTER="+counter, "MWTEST_GATE="+gate)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: waiters}}
		defer client.CloseIdleConnections()
		type answer struct {
			body, xcache string
			status       int
			err          error
		}
		send := func(method, u string) answer {
			req, _ := http.NewRequestWithContext(ctx, method, u+"/doc", nil)
			req.Host = "reports.example"
			res, err := client.Do(req)
			if err != nil {
				return answer{err: err}
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			return answer{string(b), res.Header.Get("X-Cache"), res.StatusCode, err}
		}
		if a := send(http.MethodGet, urls[0]); a.err != nil || a.xcache != "MISS" {
			t.Fatalf("first render: %q X-Cache %s, err %v", a.body, a.xcache, a.err)
		}
		valueKey := ns + ":{" + redisx.Tag("GET http://reports.example/doc") + "}"
		redistest.WaitFor(t, ctx, "the first render stored", func() bool {
			n, err := rc.Exists(ctx, valueKey).Result()
			return err == nil && n == 1
		})
		for _, u := range urls { // past max-age: must-revalidate keeps it to be revalidated
			res, err := client.Post(u+"/_advance?d=11s", "", nil)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
		}

		first := make(chan answer, 1)
		go func() { first <- send(http.MethodGet, urls[0]) }()
		if err := rc.BLPop(ctx, 20*time.Second, gate+":started").Err(); err != nil {
			t.Fatalf("waiting for the revalidation: %v", err)
		}
		answers := make(chan answer, waiters)
		for i := range waiters {
			go func() { answers <- send(http.MethodGet, urls[i%procs]) }()
		}
		// All waiting for the revalidation: the first render's miss, the
		// revalidation's and each waiter's; the other process waits on
		// the claim.
		redistest.WaitFor(t, ctx, "the waiters", func() bool {
			var misses, waits int
			for _, u := range urls {
				var m, w int
				res, err := client.Get(u + "/_stats")
				if err != nil {
					t.Fatal(err)
				}
				_, err = fmt.Fscan(res.Body, &m, &w)
				res.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				misses, waits = misses+m, waits+w
			}
			return misses >= 2+waiters && waits >= 1
		})
		if a := send(http.MethodPost, urls[1]); a.err != nil || a.status != http.StatusOK {
			t.Fatalf("the write: %d %q, err %v", a.status, a.body, a.err)
		}
		if err := rc.RPush(ctx, gate+":release", 1).Err(); err != nil {
			t.Fatal(err)
		}
		if a := <-first; a.err != nil || a.status != http.StatusOK {
			t.Errorf("the revalidating request: %d %q X-Cache %s, err %v", a.status, a.body, a.xcache, a.err)
		}
		bodies, statuses := tally(t, waiters, func() (string, string, error) { a := <-answers; return a.body, a.xcache, a.err })
		renders := renderCount(t, ctx, rc, counter)
		if renders != 3 || len(bodies) != 1 || statuses["BYPASS"] != 0 {
			t.Errorf("%d renders, bodies %v, X-Cache %v; want 3 renders (the first, the revalidation, one after the write), one body for all %d waiters, no BYPASS", renders, bodies, statuses, waiters)
		}
		for body := range bodies {
			if !strings.HasPrefix(body, "report 3 ") {
				t.Errorf("the waiters got %q, want the render made after the write", body)
			}
		}
	}, redistest.Redis8, redistest.Cluster)
}

// TestMiddleware_rangeShared_processes: on a cold key, a GET with Range
// renders (held) and 8 more with other ranges, in 2 processes, come
// meanwhile, as a media player's requests do. The handler runs once in
// the cluster, without the clients' Range; each client gets its own range
// of that render (206 with its Content-Range, 416 past the end, the whole
// 200 when its If-Range does not hold), and it is stored whole.
func TestMiddleware_rangeShared_processes(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		const procs = 2
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		rc := s.Client(t)
		ns, counter, gate := "mw"+strings.ReplaceAll(redistest.Key(t, "")[5:], "/", "."), redistest.Key(t, "renders"), redistest.Key(t, "gate")
		urls := spawnServers(t, ctx, s, procs, "serveGated", "MWTEST_NS="+ns, "MWTEST_COUNTER="+counter, "MWTEST_GATE="+gate)
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		defer client.CloseIdleConnections()
		type answer struct {
			status               int
			body, xcache, crange string
			err                  error
		}
		get := func(u string, hdr ...string) answer {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u+"/report?region=eu", nil)
			req.Host = "reports.example"
			for i := 0; i+1 < len(hdr); i += 2 {
				req.Header.Set(hdr[i], hdr[i+1])
			}
			res, err := client.Do(req)
			if err != nil {
				return answer{err: err}
			}
			defer res.Body.Close()
			b, err := io.ReadAll(res.Body)
			return answer{res.StatusCode, string(b), res.Header.Get("X-Cache"), res.Header.Get("Content-Range"), err}
		}
		// A 206's bytes are first to last of the body: first < 0 counts
		// from the end, last -1 is the last byte.
		type want struct {
			hdr         []string
			status      int
			first, last int
		}
		tests := []want{
			{[]string{"Range", "bytes=0-5"}, 206, 0, 5}, // the one that renders
			{[]string{"Range", "bytes=1-3"}, 206, 1, 3},
			{[]string{"Range", "bytes=4-"}, 206, 4, -1},
			{[]string{"Range", "bytes=-7"}, 206, -7, -1},
			{[]string{"Range", "bytes=0-0"}, 206, 0, 0},
			{[]string{"Range", "bytes=2-999999"}, 206, 2, -1},
			{[]string{"Range", "bytes=999999-"}, 416, 0, 0},
			{[]string{"Range", "bytes=0-1,3-4"}, 200, 0, 0},
			{[]string{"Range", "bytes=0-1", "If-Range", `"not-it"`}, 200, 0, 0},
		}
		answers := make([]chan answer, len(tests))
		for i := range answers {
			answers[i] = make(chan answer, 1)
		}
		go func() { answers[0] <- get(urls[0], tests[0].hdr...) }()
		if err := rc.BLPop(ctx, 20*time.Second, gate+":started").Err(); err != nil {
			t.Fatalf("waiting for the render: %v", err)
		}
		for i := 1; i < len(tests); i++ {
			go func() { answers[i] <- get(urls[i%procs], tests[i].hdr...) }()
		}
		// All waiting: in the first process on its flight, in the other
		// on its claim. A request that went to the handler fails it here.
		redistest.WaitFor(t, ctx, "the waiters", func() bool {
			if n, err := rc.Get(ctx, counter).Int(); err != nil || n != 1 {
				t.Fatalf("%d renders (%v) while the first is held; want the others waiting for it", n, err)
			}
			var misses, waits int
			for _, u := range urls {
				var m, w int
				res, err := client.Get(u + "/_stats")
				if err != nil {
					t.Fatal(err)
				}
				_, err = fmt.Fscan(res.Body, &m, &w)
				res.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				misses, waits = misses+m, waits+w
			}
			return misses == len(tests) && waits == 1
		})
		if err := rc.RPush(ctx, gate+":release", 1).Err(); err != nil {
			t.Fatal(err)
		}
		got := make([]answer, len(tests))
		for i := range tests {
			if got[i] = <-answers[i]; got[i].err != nil {
				t.Fatal(got[i].err)
			}
		}
		whole := get(urls[1]) // the stored render, whole
		if whole.err != nil || whole.status != 200 || whole.xcache != "HIT" || !strings.HasPrefix(whole.body, "report 1 ") {
			t.Fatalf("after: %d %q X-Cache %s, err %v; want a HIT of the one render", whole.status, whole.body, whole.xcache, whole.err)
		}
		full := whole.body
		for i, tt := range tests {
			a := got[i]
			wantBody, wantRange := full, ""
			switch tt.status {
			case 206:
				first, last := tt.first, tt.last
				if first < 0 {
					first = len(full) + first
				}
				if last < 0 {
					last = len(full) - 1
				}
				wantBody, wantRange = full[first:last+1], fmt.Sprintf("bytes %d-%d/%d", first, last, len(full))
			case 416:
				wantBody, wantRange = "", fmt.Sprintf("bytes */%d", len(full))
			}
			if a.status != tt.status || a.body != wantBody || a.crange != wantRange || a.xcache == "BYPASS" {
				t.Errorf("%v: %d %q Content-Range %q X-Cache %s; want %d %q Content-Range %q from the shared render",
					tt.hdr, a.status, a.body, a.crange, a.xcache, tt.status, wantBody, wantRange)
			}
		}
		if renders, err := rc.Get(ctx, counter).Int(); err != nil || renders != 1 {
			t.Errorf("%d renders (%v), want 1", renders, err)
		}
	}, redistest.Redis8, redistest.Cluster)
}

// listenAndServe serves h on a free loopback port for a worker process,
// announcing its address on stdout as "ready http://host:port".
func listenAndServe(h http.Handler) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	fmt.Println("ready http://" + l.Addr().String())
	_ = http.Serve(l, h)
	return 0
}

// spawnServers starts n worker processes running role with env and
// returns their base URLs, once each has said it is ready.
func spawnServers(tb testing.TB, ctx context.Context, s *redistest.Server, n int, role string, env ...string) []string {
	tb.Helper()
	var urls []string
	for range n {
		p := redistest.Spawn(tb, s, role, env...)
		select {
		case line := <-p.Lines():
			u, ok := strings.CutPrefix(line, "ready ")
			if !ok {
				tb.Fatalf("worker said %q", line)
			}
			urls = append(urls, u)
		case <-ctx.Done():
			tb.Fatal("worker did not start")
		}
	}
	return urls
}

// tally reads n answers with next and counts their bodies and X-Cache
// values, failing tb on the first error.
func tally(tb testing.TB, n int, next func() (body, xcache string, err error)) (bodies, statuses map[string]int) {
	tb.Helper()
	bodies, statuses = map[string]int{}, map[string]int{}
	for range n {
		body, xcache, err := next()
		if err != nil {
			tb.Fatal(err)
		}
		bodies[body]++
		statuses[xcache]++
	}
	return bodies, statuses
}

// renderCount reads the renders counted in the server under counter.
func renderCount(tb testing.TB, ctx context.Context, rc redis.UniversalClient, counter string) int {
	tb.Helper()
	n, err := rc.Get(ctx, counter).Int()
	if err != nil {
		tb.Fatal(err)
	}
	return n
}
