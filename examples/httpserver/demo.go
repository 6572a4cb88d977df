package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/redis/go-redis/v9"
)

// publicHost is the Host header the demo's requests carry, as they would
// behind a load balancer. The host is part of the cache key: requests to
// 127.0.0.1:PORT1 and 127.0.0.1:PORT2 would name two different entries.
const publicHost = "reports.example"

// instance is a child process running serve.
type instance struct {
	name, base string // base: "http://127.0.0.1:PORT"
	cmd        *exec.Cmd
	stdin      io.WriteCloser // closing it stops the instance
	exited     chan error
}

// runDemo starts two instances on one server, sends them bursts of
// concurrent requests and prints what happened. It fails if the cached
// endpoint rendered more than once.
func runDemo(ctx context.Context, requests int, ttl time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	rdb, url, closeAll, err := embedded.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()
	// A namespace of its own, so that runs sharing a real server neither
	// see each other's entries nor add to each other's counters.
	ns := "examples/httpserver/demo-" + strings.ToLower(rand.Text()[:8])
	defer cleanup(rdb, ns)

	var insts []*instance
	defer func() {
		for _, in := range insts {
			in.stop()
		}
	}()
	for _, name := range []string{"a", "b"} {
		in, err := startInstance(ctx, name, url, ns, ttl)
		if err != nil {
			return err
		}
		insts = append(insts, in)
	}

	server := "embedded miniredis"
	if os.Getenv("REDIS_URL") != "" {
		server = "REDIS_URL"
	}
	fmt.Printf("2 instances sharing one server (%s, %s):\n", server, url)
	for _, in := range insts {
		fmt.Printf("  %s  %s  (pid %d)\n", in.name, in.base, in.cmd.Process.Pid)
	}
	fmt.Printf("each burst: %d concurrent requests, alternating between the instances,\n", requests)
	fmt.Printf("all with Host: %s as behind a load balancer (the host is part of the cache key)\n\n", publicHost)

	client := &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConns: 2 * requests, MaxIdleConnsPerHost: requests},
	}
	defer client.CloseIdleConnections()

	bursts := []struct {
		label, path, counter string
		wantRenders          int64 // -1: any
	}{
		{"cold cache", "/report?region=eu", ns + ":renders:report", 1},
		{"warm cache", "/report?region=eu", ns + ":renders:report", 0},
		{"no cache", "/report/uncached?region=eu", ns + ":renders:report-uncached", -1},
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "  burst\trequest\trenders\twall time\tX-Cache from a\tX-Cache from b\n")
	var problems []string
	renders := make([]int64, len(bursts))
	cachedBodies := map[string]int{} // "render #n by x" → answers, over the cached bursts
	for i, bu := range bursts {
		before, err := counter(ctx, rdb, bu.counter)
		if err != nil {
			return err
		}
		res := burst(ctx, client, insts, bu.path, requests)
		after, err := counter(ctx, rdb, bu.counter)
		if err != nil {
			return err
		}
		renders[i] = after - before
		fmt.Fprintf(tw, "  %s\tGET %s\t%d\t%v\t%s\t%s\n", bu.label, bu.path, renders[i],
			res.wall.Round(time.Millisecond), sortedCounts(res.xcache[0]), sortedCounts(res.xcache[1]))
		if res.failed > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d requests failed, first: %s", bu.label, res.failed, res.firstErr))
		}
		if bu.wantRenders >= 0 && renders[i] != bu.wantRenders {
			problems = append(problems, fmt.Sprintf("%s: %d renders, want %d", bu.label, renders[i], bu.wantRenders))
		}
		if bu.wantRenders >= 0 {
			for b, n := range res.bodies {
				cachedBodies[b] += n
			}
		}
	}
	tw.Flush()

	fmt.Println()
	for b, n := range cachedBodies {
		fmt.Printf("%d answers from the cached endpoint, all of them %s\n", n, b)
	}
	if len(cachedBodies) != 1 {
		problems = append(problems, fmt.Sprintf("the cached endpoint answered with %d different renders", len(cachedBodies)))
	}

	fmt.Println("\nGET /stats of each instance (cache counters are per instance; a request that waited for")
	fmt.Println("the render is answered X-Cache: HIT but is a cache miss: it found no value and joined the render):")
	for _, in := range insts {
		var s Stats
		if err := getJSON(ctx, client, in.base+"/stats", &s); err != nil {
			return err
		}
		fmt.Printf("  %s: X-Cache %s; %s\n", in.name, sortedCounts(s.XCache), statsLine(s.Cache))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Printf("\nwith the middleware, %d requests on 2 instances were answered by %d render; without it, %d requests rendered %d times\n",
		2*requests, renders[0]+renders[1], requests, renders[2])
	return nil
}

// startInstance starts this program as an instance on a free port and
// waits until it listens.
func startInstance(ctx context.Context, name, url, ns string, ttl time.Duration) (*instance, error) {
	cmd := exec.CommandContext(ctx, os.Args[0], "-addr", "127.0.0.1:0", "-name", name, "-namespace", ns, "-ttl", ttl.String())
	cmd.Env = append(os.Environ(), "REDIS_URL="+url, envChild+"=1")
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start instance %s: %w", name, err)
	}
	in := &instance{name: name, cmd: cmd, stdin: stdin, exited: make(chan error, 1)}
	listening := make(chan string, 1)
	go func() {
		prefix := "instance " + name + " listening on "
		sc := bufio.NewScanner(stdout)
		for sc.Scan() { // read to the end, so the child never blocks on stdout
			if base, ok := strings.CutPrefix(sc.Text(), prefix); ok {
				select {
				case listening <- base:
				default:
				}
			}
		}
		in.exited <- cmd.Wait()
	}()
	select {
	case in.base = <-listening:
		return in, nil
	case err := <-in.exited:
		return nil, fmt.Errorf("instance %s exited before listening: %v", name, err)
	case <-time.After(30 * time.Second):
		in.stop()
		return nil, fmt.Errorf("instance %s did not start listening within 30s", name)
	case <-ctx.Done():
		in.stop()
		return nil, ctx.Err()
	}
}

// stop closes the instance's stdin, which makes it shut down, and kills it
// if it has not exited after 10s.
func (in *instance) stop() {
	in.stdin.Close()
	select {
	case <-in.exited:
	case <-time.After(10 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.exited
	}
}

// burstResult is what one burst of requests saw.
type burstResult struct {
	wall     time.Duration
	xcache   [2]map[string]uint64 // X-Cache values, per instance
	bodies   map[string]int       // "render #n by x" → answers
	failed   int
	firstErr string
}

// burst sends n requests for path at once, request i to instance i%2.
func burst(ctx context.Context, client *http.Client, insts []*instance, path string, n int) burstResult {
	res := burstResult{xcache: [2]map[string]uint64{{}, {}}, bodies: map[string]int{}}
	var (
		mu    sync.Mutex // guards res
		wg    sync.WaitGroup
		start = make(chan struct{})
	)
	for i := range n {
		in := i % len(insts)
		wg.Go(func() {
			<-start
			xc, body, err := get(ctx, client, insts[in].base+path)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if res.failed == 0 {
					res.firstErr = err.Error()
				}
				res.failed++
				return
			}
			if xc != "" {
				res.xcache[in][xc]++
			}
			res.bodies[body]++
		})
	}
	t0 := time.Now()
	close(start) // every goroutine exists: release them together
	wg.Wait()
	res.wall = time.Since(t0)
	return res
}

// get fetches one report and returns its X-Cache and a summary of it.
func get(ctx context.Context, client *http.Client, url string) (xcache, summary string, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", "", err
	}
	req.Host = publicHost
	resp, err := client.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	var rep Report
	if err := json.Unmarshal(body, &rep); err != nil {
		return "", "", fmt.Errorf("%s: %w", url, err)
	}
	return resp.Header.Get("X-Cache"), fmt.Sprintf("render #%d, by instance %s", rep.Render, rep.RenderedBy), nil
}

func getJSON(ctx context.Context, client *http.Client, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func counter(ctx context.Context, rdb *redis.Client, key string) (int64, error) {
	n, err := rdb.Get(ctx, key).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, fmt.Errorf("read %s: %w", key, err)
	}
	return n, nil
}

// statsLine shows an instance's cache counters: hits are the requests
// answered from the stored response, misses the others, of which
// coalesced joined a load or wait already running in the instance.
func statsLine(s cache.Stats) string {
	return fmt.Sprintf("cache hits=%d misses=%d (%d of them joined a render in flight) loads=%d waits=%d lock-contention=%d",
		s.Hits, s.Misses, s.Coalesced, s.Loads, s.Waits, s.LockContention)
}

// cleanup removes the demo's keys (entries and counters), which matters on
// a shared real server.
func cleanup(rdb *redis.Client, ns string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := rdb.Scan(ctx, 0, ns+":*", 100).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}
