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
	"github.com/hotkv/stampede/internal/redistest"
	"github.com/hotkv/stampede/middleware"
)

var workers = map[string]func() int{"serve": workerServe, "serveGated": workerServeGated}

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
		bodies, statuses := map[string]int{}, map[string]int{}
		for a := range answers {
			if a.err != nil {
				t.Fatal(a.err)
			}
			bodies[a.body]++
			statuses[a.xcache]++
		}
		renders, err := rc.Get(ctx, counter).Int()
		if err != nil {
			t.Fatal(err)
		}
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
		bodies, statuses := map[string]int{}, map[string]int{}
		for range waiters {
			a := <-answers
			if a.err != nil {
				t.Fatal(a.err)
			}
			bodies[a.body]++
			statuses[a.xcache]++
		}
		renders, err := rc.Get(ctx, counter).Int()
		if err != nil {
			t.Fatal(err)
		}
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
