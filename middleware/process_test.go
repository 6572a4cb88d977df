package middleware_test

import (
	"context"
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

var workers = map[string]func() int{"serve": workerServe}

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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	fmt.Println("ready http://" + l.Addr().String())
	_ = http.Serve(l, h)
	return 0
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
		var urls []string
		for range procs {
			p := redistest.Spawn(t, s, "serve", "MWTEST_NS="+ns, "MWTEST_COUNTER="+counter)
			select {
			case line := <-p.Lines():
				u, ok := strings.CutPrefix(line, "ready ")
				if !ok {
					t.Fatalf("worker said %q", line)
				}
				urls = append(urls, u)
			case <-ctx.Done():
				t.Fatal("worker did not start")
			}
		}
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
