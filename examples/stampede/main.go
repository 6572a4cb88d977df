// Command stampede is the headline demo: bursts of requests from several
// processes on one hot key whose value is expensive to load and expires,
// served first by naive cache-aside and then by cache.GetOrLoad.
//
//	go run ./examples/stampede                 # embedded server
//	go run ./examples/stampede -procs 8 -goroutines 100
//	REDIS_URL=redis://localhost:6379 go run ./examples/stampede
//
// For each approach the program starts -procs worker processes (this
// program started again with STAMPEDE_WORKER set) and sends two bursts of
// -goroutines requests per process: one on the cold key, and one just after
// the loaded value expired. The loader takes -load and counts its calls on
// the server with INCR, so that the count covers all processes. The program
// exits non-zero if cache.GetOrLoad ran the loader anything but exactly
// once in a burst, or if a request failed.
package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/hotkv/stampede/internal/toolkit/fleet"
	"github.com/redis/go-redis/v9"
)

func main() {
	if id := os.Getenv(envWorker); id != "" {
		n, _ := strconv.Atoi(id)
		if err := worker(n); err != nil {
			fmt.Fprintln(os.Stderr, "worker", id+":", err)
			os.Exit(1)
		}
		return
	}
	procs := flag.Int("procs", 4, "worker processes")
	goroutines := flag.Int("goroutines", 50, "concurrent requests per worker in each burst")
	load := flag.Duration("load", 200*time.Millisecond, "how long one load takes")
	ttl := flag.Duration("ttl", time.Second, "how long a loaded value is fresh")
	flag.Parse()
	if *procs < 1 || *goroutines < 1 || *load < time.Millisecond || *ttl < 100*time.Millisecond {
		fmt.Fprintln(os.Stderr, "stampede: -procs and -goroutines must be at least 1, -load at least 1ms, -ttl at least 100ms")
		os.Exit(2)
	}
	if err := run(*procs, *goroutines, *load, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "stampede:", err)
		os.Exit(1)
	}
}

// Phases: one burst each.
const (
	phaseCold    = "cold start"
	phaseExpired = "after expiry"
)

// burst is what one phase's workers did, added up.
type burst struct {
	approach, phase     string
	requests            int
	loads               int64 // loader calls, as counted on the server
	fresh, stale, waits int
	served              int // answered by a load: Stats.Served, summed over the workers
	errors              int
	firstErr            string
	latencies           []time.Duration
	versions            map[int64]int // value version → requests served it
	loadedBy            map[int64]int // value version → worker that loaded it
}

func (b *burst) add(w workerReport) {
	b.requests += len(w.Latencies)
	b.fresh += w.Fresh
	b.stale += w.Stale
	b.waits += w.Waited
	b.served += w.Served
	b.errors += w.Errors
	if b.firstErr == "" {
		b.firstErr = w.FirstErr
	}
	b.latencies = append(b.latencies, w.Latencies...)
	for v, n := range w.Versions {
		b.versions[v] += n
	}
	for v, by := range w.LoadedBy {
		b.loadedBy[v] = by
	}
}

// run is the parent: it starts the server and runs both approaches.
func run(procs, goroutines int, load, ttl time.Duration) error {
	// Ctrl-C or SIGTERM cancels ctx, which kills the workers, so that the
	// deferred clean-up still runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	rdb, url, closeAll, err := embedded.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()

	// Keys are unique to this run, so that runs sharing a real server do
	// not see each other's counts or values.
	prefix := "examples/stampede:" + strings.ToLower(rand.Text()[:8])
	defer cleanup(rdb, prefix)

	fmt.Printf("%d worker processes x %d goroutines per burst, loader %v, TTL %v, server %s\n",
		procs, goroutines, load, ttl, url)
	fmt.Printf("each approach: a burst on the cold key, then one %v after the value expired\n\n", pause)

	var bursts []*burst
	var notes []string
	for _, approach := range []string{approachNaive, approachCache} {
		env := []string{
			"REDIS_URL=" + url,
			envApproach + "=" + approach,
			envGoroutines + "=" + strconv.Itoa(goroutines),
			envLoad + "=" + load.String(),
			envTTL + "=" + ttl.String(),
			envPrefix + "=" + prefix,
		}
		bs, note, err := runApproach(ctx, rdb, prefix, approach, procs, env, ttl)
		if err != nil {
			return fmt.Errorf("%s: %w", approach, err)
		}
		bursts = append(bursts, bs...)
		notes = append(notes, note...)
	}
	return report(bursts, notes)
}

// pause is how long after the value expired the second burst arrives.
const pause = 100 * time.Millisecond

// runApproach runs both bursts of one approach on a fleet of workers.
func runApproach(ctx context.Context, rdb *redis.Client, prefix, approach string, procs int, env []string, ttl time.Duration) ([]*burst, []string, error) {
	ids := make([]string, procs)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	f, err := fleet.Start(ctx, ids, func(id string) []string { return append([]string{envWorker + "=" + id}, env...) })
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	if err := f.Collect(ctx, procs, func(_ int, line string) error {
		if line != "ready" {
			return fmt.Errorf("unexpected output %q", line)
		}
		return nil
	}); err != nil {
		return nil, nil, err
	}

	name := map[string]string{approachNaive: "naive cache-aside", approachCache: "stampede GetOrLoad"}[approach]
	keys := keysFor(prefix, approach)
	var bursts []*burst
	var notes []string
	for _, phase := range []string{phaseCold, phaseExpired} {
		if phase == phaseExpired {
			after, err := waitExpired(ctx, rdb, approach, keys, ttl)
			if err != nil {
				return nil, nil, err
			}
			sleep(ctx, pause)
			notes = append(notes, fmt.Sprintf("%s: the value expired %v after the cold burst ended; the second burst came %v after that",
				name, after.Round(10*time.Millisecond), pause))
		}
		b := &burst{approach: name, phase: phase, versions: map[int64]int{}, loadedBy: map[int64]int{}}
		// All workers start the burst at the same instant, a little ahead,
		// so that how fast each one reads its input does not matter.
		at := time.Now().Add(50 * time.Millisecond)
		if err := f.Broadcast(fmt.Sprintf("go %d %s", at.UnixNano(), phase)); err != nil {
			return nil, nil, err
		}
		if err := f.Collect(ctx, procs, func(w int, line string) error {
			js, ok := strings.CutPrefix(line, "report ")
			if !ok {
				return fmt.Errorf("unexpected output %q", line)
			}
			var rep workerReport
			if err := json.Unmarshal([]byte(js), &rep); err != nil {
				return fmt.Errorf("bad report: %w", err)
			}
			b.add(rep)
			return nil
		}); err != nil {
			return nil, nil, err
		}
		bursts = append(bursts, b)
	}

	if approach == approachCache {
		// The second burst was served stale and started one background
		// refresh; wait for it to land before the workers stop.
		c, err := cache.New(rdb, &cache.Options{Namespace: keys.namespace})
		if err != nil {
			return nil, nil, err
		}
		defer c.Close()
		start := time.Now()
		for {
			v, err := cache.Get[Value](ctx, c, hotKey)
			if err == nil {
				notes = append(notes, fmt.Sprintf("%s: the refresh started by the second burst stored v%d (loaded by worker %d) %v after the burst ended",
					name, v.Version, v.Worker, time.Since(start).Round(10*time.Millisecond)))
				break
			}
			if !errors.Is(err, cache.ErrStale) || time.Since(start) > 5*time.Second {
				return nil, nil, fmt.Errorf("waiting for the background refresh: %w", err)
			}
			sleep(ctx, 10*time.Millisecond)
		}
	}
	if err := f.Finish(ctx); err != nil {
		return nil, nil, err
	}
	loads, err := rdb.HGetAll(ctx, keys.loads).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("read loader calls: %w", err)
	}
	for _, b := range bursts {
		b.loads, _ = strconv.ParseInt(loads[b.phase], 10, 64)
	}
	return bursts, notes, nil
}

// waitExpired waits until the value of approach has expired, as a reader
// sees it: the naive key is gone from the server, the cache's entry is
// stale (it stays on the server for Expiry.Stale more). It returns how long it
// waited.
func waitExpired(ctx context.Context, rdb *redis.Client, approach string, keys runKeys, ttl time.Duration) (time.Duration, error) {
	c, err := cache.New(rdb, &cache.Options{Namespace: keys.namespace})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	start := time.Now()
	for {
		var expired bool
		if approach == approachNaive {
			n, err := rdb.Exists(ctx, keys.naive).Result()
			if err != nil {
				return 0, err
			}
			expired = n == 0
		} else {
			_, err := cache.Get[Value](ctx, c, hotKey)
			if err != nil && !errors.Is(err, cache.ErrStale) {
				return 0, err
			}
			expired = err != nil
		}
		if expired {
			return time.Since(start), nil
		}
		if time.Since(start) > ttl+5*time.Second {
			return 0, fmt.Errorf("the value did not expire within %v", ttl+5*time.Second)
		}
		sleep(ctx, time.Millisecond)
	}
}

// report prints the bursts side by side and returns an error if stampede's
// loader ran anything but once per burst or a request failed.
func report(bursts []*burst, notes []string) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "approach\tphase\trequests\tloader calls\tcallers per load\tserved fresh\tserved stale\twaited for a load\tp50\tp99\tmax\t")
	for _, b := range bursts {
		slices.Sort(b.latencies)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%v\t%v\t%v\t\n", b.approach, b.phase, b.requests, b.loads, perLoad(b),
			b.fresh, b.stale, b.waits, quantile(b.latencies, 0.50), quantile(b.latencies, 0.99), quantile(b.latencies, 1))
	}
	tw.Flush()

	fmt.Println("\nvalues served (version x requests):")
	for _, b := range bursts {
		fmt.Printf("  %-18s  %-12s  %s\n", b.approach, b.phase, versions(b))
	}
	fmt.Println("\ntimeline:")
	for _, n := range notes {
		fmt.Println("  " + n)
	}
	fmt.Println()

	var problems []string
	for _, b := range bursts {
		if b.errors > 0 {
			problems = append(problems, fmt.Sprintf("%s, %s: %d requests failed, first: %s", b.approach, b.phase, b.errors, b.firstErr))
		}
		if b.approach == "stampede GetOrLoad" && b.loads != 1 {
			problems = append(problems, fmt.Sprintf("%s, %s: the loader ran %d times, want exactly 1", b.approach, b.phase, b.loads))
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	naive := bursts[0].loads + bursts[1].loads
	fmt.Printf("the loader ran %d times for naive cache-aside and %d times for stampede's GetOrLoad (once per burst)\n",
		naive, bursts[2].loads+bursts[3].loads)
	fmt.Printf("stampede's cold-start load answered %d of its %d requests (cache.Stats.Served summed over the workers)\n",
		bursts[2].served, bursts[2].requests)
	return nil
}

// perLoad is how many requests each load of b answered: those a load
// answered (Served), and, for a refresh, those served the stale value
// meanwhile.
func perLoad(b *burst) string {
	if b.loads == 0 {
		return "-"
	}
	return strconv.FormatFloat(float64(b.served+b.stale)/float64(b.loads), 'f', 1, 64)
}

// versions summarises which value versions a burst's requests got.
func versions(b *burst) string {
	vs := make([]int64, 0, len(b.versions))
	for v := range b.versions {
		vs = append(vs, v)
	}
	slices.Sort(vs)
	if len(vs) > 3 {
		return fmt.Sprintf("%d different versions, v%d..v%d, each loaded by the request that got it", len(vs), vs[0], vs[len(vs)-1])
	}
	var parts []string
	for _, v := range vs {
		parts = append(parts, fmt.Sprintf("v%d x %d (loaded by worker %d)", v, b.versions[v], b.loadedBy[v]))
	}
	return strings.Join(parts, ", ")
}

// quantile returns the q-quantile of sorted durations, rounded for
// display.
func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	d := sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
	switch {
	case d >= 10*time.Millisecond:
		return d.Round(time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(100 * time.Microsecond)
	}
	return d.Round(10 * time.Microsecond)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// cleanup removes this run's keys, which matters on a shared real server.
func cleanup(rdb *redis.Client, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, approach := range []string{approachNaive, approachCache} {
		k := keysFor(prefix, approach)
		rdb.Del(ctx, k.naive, k.version, k.loads)
		if c, err := cache.New(rdb, &cache.Options{Namespace: k.namespace}); err == nil {
			_ = c.Delete(ctx, hotKey)
			c.Close()
		}
	}
}
