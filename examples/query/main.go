// Command query runs one expensive SQLite query from several processes at
// once, first directly and then through cache.GetOrLoad, and counts how
// many times the query really ran in each case.
//
//	go run ./examples/query                       # embedded server
//	go run ./examples/query -procs 8 -goroutines 32 -rows 500000
//	REDIS_URL=redis://localhost:6379 go run ./examples/query
//
// The parent creates a SQLite database in a temporary directory and fills
// it with orders. Each round then starts -procs worker processes (this
// program started again with QUERY_WORKER set), which open the same file
// read-only and connect to the same server; once all of them are ready
// they fire -goroutines requests each, all at the same moment. Every run of
// the query is counted on the server with INCR, so that the count covers
// all processes. The program exits non-zero if, with the cache, the query
// did not run exactly once.
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
	"path/filepath"
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
	procs := flag.Int("procs", 4, "worker processes per round")
	goroutines := flag.Int("goroutines", 16, "concurrent requests per worker process")
	rows := flag.Int("rows", 200_000, "orders in the database")
	flag.Parse()
	if *procs < 1 || *goroutines < 1 || *rows < 1 {
		fmt.Fprintln(os.Stderr, "query: -procs, -goroutines and -rows must be at least 1")
		os.Exit(2)
	}
	if err := run(*procs, *goroutines, *rows); err != nil {
		fmt.Fprintln(os.Stderr, "query:", err)
		os.Exit(1)
	}
}

// round is what one round's workers did, added up.
type round struct {
	name     string
	requests int
	runs     int64 // query executions, as counted on the server
	wall     time.Duration
	slowest  time.Duration
	total    time.Duration // sum of request times
	errors   int
	firstErr string
	answers  map[string]int
	stats    []cache.Stats // one per worker; empty without the cache
}

// run is the parent: it prepares the database and runs both rounds.
func run(procs, goroutines, rows int) error {
	// Ctrl-C or SIGTERM cancels ctx, which kills the workers, so that the
	// deferred clean-up (temporary directory, keys) still runs.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()

	rdb, url, closeAll, err := embedded.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()

	dir, err := os.MkdirTemp("", "stampede-query-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "shop.db")
	start := time.Now()
	if err := createShop(ctx, path, rows); err != nil {
		return err
	}
	filled := time.Since(start)
	size := int64(0)
	if fi, err := os.Stat(path); err == nil {
		size = fi.Size()
	}

	db, err := openShop(path)
	if err != nil {
		return err
	}
	_, _, err = timeQuery(ctx, db) // warm the OS page cache
	if err != nil {
		db.Close()
		return err
	}
	answer, alone, err := timeQuery(ctx, db)
	db.Close()
	if err != nil {
		return err
	}
	want := digest(answer)

	fmt.Printf("%d worker processes x %d goroutines, one request each, server %s\n", procs, goroutines, embedded.Redacted(url))
	fmt.Printf("database: %d orders, %d customers, %.1f MB, filled in %v\n",
		rows, max(rows/20, 1), float64(size)/(1<<20), filled.Round(time.Millisecond))
	fmt.Printf("the query alone: %v\n\n", alone.Round(time.Millisecond))

	// Keys are unique to this run, so that runs sharing a real server do
	// not see each other's counts or cached answer.
	id := strings.ToLower(rand.Text()[:8])
	cacheKey := "examples/query:revenue-by-segment:" + id
	counters := []string{"examples/query:" + id + ":runs:without-cache", "examples/query:" + id + ":runs:with-cache"}
	defer cleanup(rdb, cacheKey, counters)

	rounds := []round{{name: "without cache"}, {name: "with cache"}}
	for i, mode := range []string{modeDirect, modeCached} {
		env := []string{
			"REDIS_URL=" + url,
			envMode + "=" + mode,
			envDB + "=" + path,
			envGoroutines + "=" + strconv.Itoa(goroutines),
			envCounter + "=" + counters[i],
			envCacheKey + "=" + cacheKey,
		}
		if err := runRound(ctx, procs, env, &rounds[i]); err != nil {
			return fmt.Errorf("round %q: %w", rounds[i].name, err)
		}
		if rounds[i].runs, err = rdb.Get(ctx, counters[i]).Int64(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read %s: %w", counters[i], err)
		}
	}
	return report(rounds, answer, want)
}

// runRound starts procs workers with env, lets them all go at once and
// collects their reports into r.
func runRound(ctx context.Context, procs int, env []string, r *round) error {
	ids := make([]string, procs)
	for i := range ids {
		ids[i] = strconv.Itoa(i)
	}
	f, err := fleet.Start(ctx, ids, func(id string) []string { return append([]string{envWorker + "=" + id}, env...) })
	if err != nil {
		return err
	}
	defer f.Close() // kills workers left behind by an error

	if err := f.Collect(ctx, procs, func(_ int, line string) error {
		if line != "ready" {
			return fmt.Errorf("unexpected output %q", line)
		}
		return nil
	}); err != nil {
		return err
	}
	// Everyone is connected and has the database open: start all requests
	// together, as when a hot entry expires.
	start := time.Now()
	if err := f.Broadcast("go"); err != nil {
		return err
	}
	r.answers = map[string]int{}
	if err := f.Collect(ctx, procs, func(_ int, line string) error {
		payload, ok := strings.CutPrefix(line, "report ")
		if !ok {
			return fmt.Errorf("unexpected output %q", line)
		}
		var w workerReport
		if err := json.Unmarshal([]byte(payload), &w); err != nil {
			return fmt.Errorf("bad report: %w", err)
		}
		r.add(w)
		return nil
	}); err != nil {
		return err
	}
	r.wall = time.Since(start)
	return f.Finish(ctx)
}

func (r *round) add(w workerReport) {
	r.requests += w.Requests
	r.errors += w.Errors
	if r.firstErr == "" {
		r.firstErr = w.FirstErr
	}
	r.slowest = max(r.slowest, w.Slowest)
	r.total += w.Total
	for d, n := range w.Answers {
		r.answers[d] += n
	}
	if w.Stats != nil {
		r.stats = append(r.stats, *w.Stats)
	}
}

// report prints the rounds side by side and returns an error if anything
// went wrong, above all if the cached round ran the query more than once.
func report(rounds []round, answer []Segment, want string) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\trequests\tquery runs\twall time\tmean request\tslowest request\t")
	for _, r := range rounds {
		mean := time.Duration(0)
		if r.requests > 0 {
			mean = r.total / time.Duration(r.requests)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%v\t%v\t\n", r.name, r.requests, r.runs,
			r.wall.Round(time.Millisecond), mean.Round(time.Millisecond), r.slowest.Round(time.Millisecond))
	}
	tw.Flush()

	cached := rounds[1]
	fmt.Println("\ncache stats per worker (with cache):")
	var sum cache.Stats
	for i, s := range cached.stats {
		fmt.Printf("  worker %d: %s\n", i, statsLine(s))
		sum = sum.Add(s)
	}
	fmt.Printf("  total   : %s\n", statsLine(sum))

	fmt.Println("\nanswer (paid orders in 2025, by customer segment):")
	tw = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "  segment\tpaid orders\trevenue\taverage\tlargest\t")
	for _, s := range answer {
		fmt.Fprintf(tw, "  %s\t%d\t%.2f\t%.2f\t%.2f\t\n", s.Name, s.Orders,
			float64(s.RevenueCents)/100, s.AvgCents/100, float64(s.MaxCents)/100)
	}
	tw.Flush()
	fmt.Println()

	var problems []string
	for _, r := range rounds {
		if r.errors > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d requests failed, first: %s", r.name, r.errors, r.firstErr))
		}
		if wrong := r.requests - r.errors - r.answers[want]; wrong > 0 {
			problems = append(problems, fmt.Sprintf("%s: %d requests got a different answer", r.name, wrong))
		}
	}
	if cached.runs != 1 {
		problems = append(problems, fmt.Sprintf("with the cache the query ran %d times, want exactly 1", cached.runs))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	direct := rounds[0]
	fmt.Printf("all %d requests got the same answer; the query ran %d times without the cache and once with it\n",
		direct.requests+cached.requests, direct.runs)
	return nil
}

func statsLine(s cache.Stats) string {
	return fmt.Sprintf("misses=%d hits=%d loads=%d coalesced=%d waits=%d lock-contention=%d wait-timeouts=%d fail-open=%d server-errors=%d",
		s.Misses, s.Hits, s.Loads, s.Coalesced, s.Waits, s.LockContention, s.WaitTimeouts, s.FailOpenLoads, s.ServerErrors)
}

// cleanup removes this run's keys, which matters on a shared real server.
func cleanup(rdb *redis.Client, cacheKey string, counters []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rdb.Del(ctx, counters...)
	if c, err := cache.New(rdb, nil); err == nil {
		_ = c.Delete(ctx, cacheKey)
		c.Close()
	}
}
