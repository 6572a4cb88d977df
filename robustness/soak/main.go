// Command soak runs mixed traffic with random network faults against one
// Redis-protocol server for a bounded time, from several worker processes,
// and ends with a summary whose invariants must hold: no lost updates, no
// stale sets, no read older than the coherence bound, and no growth of
// goroutines or heap. It is part of the robustness module (its tests run
// with the robustness suite's); from the repository root:
//
//	go run ./robustness/soak                       # 3 minutes on an embedded miniredis
//	go run ./robustness/soak -duration 30s -workers 3 -redis redis://127.0.0.1:6379
//	scripts/soak.sh 5m                             # the long form, on a Redis 8 it starts
//
// and go run ./soak from the robustness folder.
//
// Each worker process puts its own fault proxy (internal/testkit/faultproxy) in
// front of the server for its cache and lock clients, and injects latency,
// latency spikes, resets, drops and short black holes on a seeded random
// schedule. The "database", the source of truth, lives on the same server
// but is reached over a direct client that is never faulted.
//
// Traffic in every worker:
//   - readers: cache.GetOrLoad on Zipf-distributed keys; the loader reads
//     the key's version from the database and returns "key@version";
//   - writers: increment a key's version in the database, then Delete the
//     cached value through the faulty client, retrying until it succeeds;
//   - lockers: lock.Do with fencing around a fenced read-modify-write of a
//     counter in the database; a few rounds are a holder that stalls past
//     its lock's TTL without noticing, which fencing must turn away.
//   - HTTP clients: GETs of random pages, with random users, from the
//     worker's own loopback HTTP server, whose handler is wrapped by the
//     middleware over a Cache of its own (through the faulty client, in a
//     namespace all workers share, and with the same Host everywhere, so
//     one worker's renders answer the others): public pages with a query,
//     per-user pages with Vary: X-User, private pages and pages that set a
//     cookie (see http.go).
//
// Invariants checked (any failure makes the exit status 1):
//   - lost updates: each counter equals the increments accepted for it;
//   - stale sets: the coordinator audits the cache about twice a second and
//     once after the traffic has stopped; a cached version below the one a
//     completed Delete followed is a rebuild that wrote after that Delete,
//     and at the end every cached value must equal the database's; each
//     worker also checks every GET of its cache client against every
//     worker's Deletes recorded as returned before the GET was sent;
//   - no value is ever returned for the wrong key;
//   - coherence: no read (GetOrLoad, or Get) returns a version that a completed Delete
//     (any worker's) had superseded more than the coherence bound before
//     the call began. The first -near-workers workers (default: half)
//     run their caches with the near cache (cache.Options.Near, a small
//     MaxEntries so that it evicts, and a short Lease so that black holes
//     make it lapse; its tracking connections go through the worker's
//     fault proxy like the rest), and the bound is that Lease plus a
//     margin (see coherence.go). Reads the near cache did not answer,
//     made while the Cache may have been failing open, are counted apart
//     (GetOrLoad promises nothing about other processes' Deletes then).
//     On a server that tracks (not miniredis), the near cache must have
//     answered reads. A stricter form: -near-workers N (all) -near-lease
//     50ms -near-margin 0;
//   - no wrong HTTP response: every reply is for the requested path and
//     query, for the request's user where the page depends on it, and a
//     private page, a page that sets a cookie or a request with a cookie
//     is never answered from the cache (X-Cache HIT or STALE);
//   - goroutines and heap do not grow between the end of the warm-up and the
//     end of the run (both measured with traffic stopped and caches open),
//     and closing everything returns goroutines to where they started.
//
// It prints a progress line every 10 s and a summary table, and writes the
// summary as JSON with -json.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/hotkv/stampede/internal/toolkit/fleet"
	"github.com/redis/go-redis/v9"
)

func main() {
	if isWorker() {
		os.Exit(workerMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

// run is the whole soak: the progress goes to stderr, the summary to
// stdout. It returns an error when an invariant fails.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	sum, err := soak(ctx, o, stderr)
	if err != nil {
		return err
	}
	sum.Command = strings.TrimSpace("go run ./robustness/soak " + strings.Join(args, " "))
	writeTable(stdout, sum)
	if o.json != "" {
		b, err := json.MarshalIndent(sum, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(o.json, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if len(sum.Failures) > 0 {
		return fmt.Errorf("%d invariant(s) failed: %s", len(sum.Failures), strings.Join(sum.Failures, "; "))
	}
	return nil
}

// soak runs the workers and checks the invariants.
func soak(ctx context.Context, o options, stderr io.Writer) (*summary, error) {
	url, server := o.url, "external"
	if url == "" {
		s, err := embedded.Start()
		if err != nil {
			return nil, err
		}
		defer s.Close()
		url, server = "redis://"+s.Addr(), "embedded miniredis"
	}
	ropts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("-redis: %w", err)
	}
	ropts.PoolSize = 16
	rdb := redis.NewClient(ropts)
	defer rdb.Close()
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	version, err := serverVersion(pctx, rdb)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("server %s: %w", ropts.Addr, err)
	}

	prefix := "soak:" + runID()
	sum := &summary{Server: server + " " + version, Addr: ropts.Addr, Seed: o.seed, Workers: o.workers, Keys: o.keys,
		Counters: o.counters, Readers: o.readers, Writers: o.writers, Lockers: o.lockers, HTTPClients: o.http,
		NearWorkers: o.nearWorkers, NearEntries: o.nearEntries, NearLease: o.nearLease.String(), Bound: (o.nearLease + o.nearMargin).String(),
		Duration: o.duration.String(), Warmup: o.warmup.String(), Started: time.Now(),
		Errors: map[string]int64{}, Faults: map[string]int64{}, XCache: map[string]int64{}}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := cleanup(cctx, rdb, prefix); err != nil {
			fmt.Fprintf(stderr, "soak: clean up %s*: %v\n", prefix, err)
		}
	}()

	fmt.Fprintf(stderr, "soak: %s at %s, %d workers x (%d readers, %d writers, %d lockers, %d HTTP clients), %d keys, seed %d, warm-up %v, run %v\n",
		sum.Server, ropts.Addr, o.workers, o.readers, o.writers, o.lockers, o.http, o.keys, o.seed, o.warmup, o.duration)

	names := make([]string, o.workers)
	for i := range names {
		names[i] = "w" + strconv.Itoa(i)
	}
	cfgs := map[string]string{}
	for i, n := range names {
		b, _ := json.Marshal(workerConfig{Index: i, URL: url, Prefix: prefix, Keys: o.keys, Counters: o.counters,
			Seed: o.seed, Readers: o.readers, Writers: o.writers, Lockers: o.lockers, HTTP: o.http, Warmup: o.warmup, Sabotage: o.sabotage,
			Near: i < o.nearWorkers, NearEntries: o.nearEntries, NearLease: o.nearLease, Bound: o.nearLease + o.nearMargin})
		cfgs[n] = string(b)
	}
	fctx, fcancel := context.WithCancel(ctx)
	defer fcancel()
	f, err := fleet.Start(fctx, names, func(name string) []string {
		return []string{envWorker + "=" + name, envConfig + "=" + cfgs[name]}
	})
	if err != nil {
		return nil, fmt.Errorf("start workers: %w", err)
	}
	defer f.Close()

	// ask sends cmd to every worker and collects one answer of kind from each.
	ask := func(cmd, kind string, timeout time.Duration, into func(i int, payload []byte) error) error {
		if err := f.Broadcast(cmd); err != nil {
			return fmt.Errorf("%s: %w", cmd, err)
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return f.Collect(cctx, o.workers, func(i int, line string) error {
			k, payload, _ := strings.Cut(line, " ")
			if k != kind {
				return fmt.Errorf("answered %q to %s", line, cmd)
			}
			return into(i, []byte(payload))
		})
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = f.Collect(cctx, o.workers, func(_ int, line string) error {
		if !strings.HasPrefix(line, "ready") {
			return fmt.Errorf("said %q, want ready", line)
		}
		return nil
	})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("workers starting: %w", err)
	}

	aud, err := newAuditor(rdb, prefix, o.keys)
	if err != nil {
		return nil, err
	}
	defer aud.close()
	actx, stopAudit := context.WithCancel(ctx)
	var auditWG sync.WaitGroup
	auditWG.Go(func() { aud.loop(actx, 500*time.Millisecond) })
	defer func() { stopAudit(); auditWG.Wait() }()

	begin := time.Now()
	starts := make([]snapshot, o.workers)
	fmt.Fprintf(stderr, "soak: warming up for %v\n", o.warmup)
	if err := ask("warm", "warmed", o.warmup+time.Minute, func(i int, p []byte) error {
		return json.Unmarshal(p, &starts[i])
	}); err != nil {
		return nil, fmt.Errorf("warm-up: %w", err)
	}
	if err := f.Broadcast("run"); err != nil {
		return nil, err
	}
	runStart := time.Now()
	end := runStart.Add(o.duration)
	reports := make([]workerReport, o.workers)
	for {
		left := time.Until(end)
		if left <= 0 {
			break
		}
		if !pause(ctx, min(o.progress, left)) {
			return nil, fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
		if time.Until(end) <= 0 {
			break
		}
		if err := ask("stats", "stats", time.Minute, func(i int, p []byte) error {
			return json.Unmarshal(p, &reports[i])
		}); err != nil {
			return nil, fmt.Errorf("stats: %w", err)
		}
		progressLine(stderr, time.Since(begin), reports, aud.staleSets())
	}
	if err := ask("stop", "done", 2*time.Minute, func(i int, p []byte) error {
		return json.Unmarshal(p, &reports[i])
	}); err != nil {
		return nil, fmt.Errorf("stop: %w", err)
	}
	sum.Elapsed = time.Since(begin).Round(time.Millisecond).String()
	stopAudit()
	auditWG.Wait()
	fctxFinish, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = f.Finish(fctxFinish)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("workers finishing: %w", err)
	}

	// Traffic has stopped and every worker has exited: audit once more,
	// then compare the cache with the database.
	fctx2, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := aud.audit(fctx2); err != nil {
		return nil, fmt.Errorf("final audit: %w", err)
	}
	excluded := map[string]bool{}
	for _, r := range reports {
		for _, k := range r.Excluded {
			excluded[k] = true
		}
	}
	atEnd, samples, err := aud.compare(fctx2, excluded)
	if err != nil {
		return nil, fmt.Errorf("final comparison: %w", err)
	}
	counters := map[string]int64{}
	for n := range o.counters {
		v, err := rdb.Get(fctx2, ctrKey(prefix, n)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("read counter: %w", err)
		}
		counters[ctrKey(prefix, n)] = v
	}
	sum.fill(reports, starts, counters, aud, atEnd, samples, len(excluded))
	return sum, nil
}

// serverVersion pings the server and returns its name and version from
// INFO, if it answers that (miniredis does not).
func serverVersion(ctx context.Context, rdb *redis.Client) (string, error) {
	if err := rdb.Ping(ctx).Err(); err != nil {
		return "", err
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "(version unknown)", nil
	}
	name, version := "redis", ""
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "redis_version":
			version = v
		case "valkey_version":
			name, version = "valkey", v
		}
	}
	return name + " " + version, nil
}

// cleanup deletes every key of the run.
func cleanup(ctx context.Context, rdb *redis.Client, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			if err := rdb.Del(ctx, batch...).Err(); err != nil {
				return err
			}
			batch = batch[:0]
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	if len(batch) > 0 {
		return rdb.Del(ctx, batch...).Err()
	}
	return nil
}

func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().Unix(), 36) + hex.EncodeToString(b[:])
}

// auditor looks for stale sets: it reads, for each key, the version of the
// latest completed Delete (raised by writers after the Delete returned),
// then the cached value, over fault-free connections. A cached version
// below it was written after that Delete by a rebuild that read the
// database before the update the Delete followed: a stale set.
type auditor struct {
	rdb    *redis.Client
	c      *cache.Cache
	prefix string
	keys   int

	mu      sync.Mutex      // guards the fields below
	stale   map[string]bool // "key@version" of stale values seen
	wrong   int64
	rounds  int64
	samples []string
	errs    int64
}

func newAuditor(rdb *redis.Client, prefix string, keys int) (*auditor, error) {
	c, err := cache.New(rdb, &cache.Options{Namespace: namespace(prefix)})
	if err != nil {
		return nil, err
	}
	return &auditor{rdb: rdb, c: c, prefix: prefix, keys: keys, stale: map[string]bool{}}, nil
}

func (a *auditor) close() { _ = a.c.Close() }

func (a *auditor) loop(ctx context.Context, every time.Duration) {
	for pause(ctx, every) {
		if err := a.audit(ctx); err != nil && ctx.Err() == nil {
			a.mu.Lock()
			a.errs++
			a.mu.Unlock()
		}
	}
}

// audit checks every key once.
func (a *auditor) audit(ctx context.Context) error {
	for k := range a.keys {
		floor, err := a.rdb.Get(ctx, delKey(a.prefix, k)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		v, err := cache.Get[string](ctx, a.c, cacheKey(k))
		switch {
		case errors.Is(err, cache.ErrMiss):
			continue
		case err != nil && !errors.Is(err, cache.ErrStale):
			return err
		}
		key, ver, _, ok := parseValue(v)
		a.mu.Lock()
		switch {
		case !ok || key != cacheKey(k):
			a.wrong++
			a.sampleLocked(fmt.Sprintf("cache holds %q under %s", v, cacheKey(k)))
		case ver < floor && !a.stale[v]:
			a.stale[v] = true
			a.sampleLocked(fmt.Sprintf("cache holds %s after a completed Delete that followed version %d", v, floor))
		}
		a.mu.Unlock()
	}
	a.mu.Lock()
	a.rounds++
	a.mu.Unlock()
	return nil
}

func (a *auditor) sampleLocked(s string) {
	if len(a.samples) < 5 {
		a.samples = append(a.samples, s)
	}
}

func (a *auditor) staleSets() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int64(len(a.stale))
}

// compare reads every key's cached value and database version once the
// traffic is over: a cached value must be absent or hold the database's
// version, except for keys whose Delete never succeeded.
func (a *auditor) compare(ctx context.Context, excluded map[string]bool) (int64, []string, error) {
	var bad int64
	var samples []string
	for k := range a.keys {
		if excluded[cacheKey(k)] {
			continue
		}
		db, err := a.rdb.Get(ctx, dbKey(a.prefix, k)).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return 0, nil, err
		}
		v, err := cache.Get[string](ctx, a.c, cacheKey(k))
		switch {
		case errors.Is(err, cache.ErrMiss):
			continue
		case err != nil && !errors.Is(err, cache.ErrStale):
			return 0, nil, err
		}
		if key, ver, _, ok := parseValue(v); !ok || key != cacheKey(k) || ver != db {
			bad++
			if len(samples) < 5 {
				samples = append(samples, fmt.Sprintf("at the end the cache holds %q, the database version %d", v, db))
			}
		}
	}
	return bad, samples, nil
}
