// Command robustness runs recorded traffic from several worker processes
// against a Redis-protocol server it starts, fires failpoints meanwhile,
// and checks the whole recorded history against what the docs promise, in
// the manner of etcd's robustness tests:
//
//	go run ./robustness                                   # 1 minute on Redis 8.6, random seed
//	go run ./robustness -server valkey -duration 1h -seed 7
//	go run ./robustness -sabotage fence                   # shows the fencing check catch it
//	go run ./robustness -server cluster -seed 5           # three masters with a replica each, failed over
//
// The traffic (see traffic_*.go): GetOrLoad, GetOrLoadMany, Get, Set and
// Delete on a namespace whose values live an hour (lin, no near cache)
// and one whose values expire and go stale within a second (exp, near
// cache in half the processes, tagged values, InvalidateTag and
// SoftInvalidateTag), with loaders that succeed, fail, panic,
// outlive LoadTimeout or find nothing and values large enough for the
// digest path; fenced counters under lock.Do, holders that stall past
// their TTL, and lock.RunOnce slots; HTTP GETs and POSTs through the
// middleware, PurgeURL and PurgeTag. Every operation is recorded with its
// call and return times, process, inputs and result.
//
// The failpoints: each worker's own fault proxy (latency, spikes, black
// holes, resets, drops, refused connections); pauses, and with -crash
// crashes, at the library's failpoints between two steps of the claim
// protocol or a render (internal/failpoint); and the server's faults
// (package nemesis: BUSY, OOM, LOADING, a pause, a pause then a kill, a
// restart, write permissions taken away; on a Cluster, a pause of one
// master and failovers, graceful or by TAKEOVER).
//
// The checker (check*.go): linearizability of lin (Porcupine), read your
// writes and no stale sets, one loader run per key, remote failures, the
// values themselves, fencing, RunOnce, purges, tag invalidations
// (check_tags.go), and leaks; on a Cluster,
// what a TAKEOVER can lose is excused (check_takeover.go). A failed run
// writes report.md (and Porcupine's visualisation of a key that is not
// linearizable) in its directory and exits 1.
//
// The soak (soak/, go run ./robustness/soak) is the module's other
// command: mixed traffic under random network faults for minutes or
// hours, checked against a few invariants at its end.
package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/robustness/nemesis"
	"github.com/redis/go-redis/v9"
)

func main() {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "robustness:", err)
		os.Exit(1)
	}
}

// options are a run's flags.
type options struct {
	duration  time.Duration
	workers   int
	seed      uint64
	server    string
	dir       string
	faults    []nemesis.Fault // the server's
	mix       mix
	sabotage  []string
	skip      []string
	nearBound time.Duration
	strict    bool
	round     time.Duration // a long run is rounds of this, each with fresh processes, keys and history
	retries   int           // go-redis retries of the workers' server client
}

func parseFlags(args []string, out io.Writer) (options, error) {
	fs := flag.NewFlagSet("robustness", flag.ContinueOnError)
	fs.SetOutput(out)
	var o options
	var faults, sabotage, skip string
	fs.DurationVar(&o.duration, "duration", time.Minute, "how long the traffic runs")
	fs.DurationVar(&o.round, "round", 2*time.Minute, "a run longer than this is checked in rounds of it (seed+1 each), so that the history and Porcupine's search stay bounded")
	fs.IntVar(&o.workers, "workers", 4, "worker processes")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the traffic and failpoints (default: random, printed)")
	fs.StringVar(&o.server, "server", string(redistest.Redis8), "server kind: redis8, valkey, redis7, cluster (three Redis 8 masters, a replica each) or miniredis")
	fs.StringVar(&o.dir, "dir", "", "directory for the histories and the report (default: a new temporary one, kept when the run fails)")
	fs.StringVar(&faults, "faults", "busy,oom,loading,pause,pause-kill,acl,restart", "the server's faults, comma-separated; none: \"\" (default on a cluster: "+clusterFaults+")")
	fs.BoolVar(&o.mix.Proxy, "proxy", true, "faults of each worker's proxy")
	fs.IntVar(&o.retries, "retries", 0, "go-redis retries of the workers' server client (MaxRetries; on a cluster MaxRedirects, which also follows MOVED); 0: none")
	fs.BoolVar(&o.mix.Failpoints, "failpoints", true, "pauses at the library's failpoints")
	fs.BoolVar(&o.mix.Crash, "crash", true, "crashes at the library's failpoints (the crashed worker is replaced)")
	fs.IntVar(&o.mix.Lin, "lin", 3, "goroutines per worker on namespace lin")
	fs.IntVar(&o.mix.Exp, "exp", 3, "goroutines per worker on namespace exp")
	fs.IntVar(&o.mix.Locks, "locks", 1, "lock goroutines per worker (and as many RunOnce ones)")
	fs.IntVar(&o.mix.HTTP, "http", 2, "HTTP client goroutines per worker")
	fs.IntVar(&o.mix.Fail, "fail", 8, "percent of loader runs that fail (a quarter as many again panic, as many outlive LoadTimeout)")
	fs.IntVar(&o.mix.Garbage, "garbage", 2, "percent of exp operations that write bytes no cache can decode (the replace path)")
	fs.IntVar(&o.mix.Cap, "cap", 3, "fleet-wide cap on exp's concurrent loads (cache.Options.Backends, the same in every worker); 0: none")
	fs.IntVar(&o.mix.Invalidate, "invalidate", 5, "percent of exp operations that invalidate a tag, three in five with InvalidateTag, the others with SoftInvalidateTag")
	fs.StringVar(&sabotage, "sabotage", "", "break a promise on purpose, to show a check catches it: fence, waiter, purge, softpurge, stale, tags, softtags, cap (comma-separated)")
	fs.BoolVar(&o.strict, "strict", false, "fail on violations an open issue names too (the checker marks such a violation known; none today)")
	fs.StringVar(&skip, "skip", "", "validators to leave out, comma-separated")
	fs.DurationVar(&o.nearBound, "near-bound", nearLease+150*time.Millisecond, "how long a near cache may serve what another process changed (the Lease, plus scheduling)")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./robustness [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if o.server == string(redistest.Cluster) && !set["faults"] {
		faults = clusterFaults
	}
	for _, f := range strings.Split(faults, ",") {
		if f = strings.TrimSpace(f); f != "" {
			nf, err := nemesis.ParseFault(f)
			if err != nil {
				return o, err
			}
			o.faults = append(o.faults, nf)
		}
	}
	for _, s := range strings.Split(sabotage, ",") {
		switch s = strings.TrimSpace(s); s {
		case "":
		case "fence", "waiter", "purge", "softpurge", "stale", "tags", "softtags", "cap":
			o.sabotage = append(o.sabotage, s)
		default:
			return o, fmt.Errorf("-sabotage: unknown %q (fence, waiter, purge, softpurge, stale, tags, softtags, cap)", s)
		}
	}
	if skip != "" {
		o.skip = strings.Split(skip, ",")
	}
	switch {
	case o.duration <= 0:
		return o, errors.New("-duration must be positive")
	case o.mix.Fail < 0 || o.mix.Fail > 50 || o.mix.Garbage < 0 || o.mix.Garbage > 15 || o.mix.Invalidate < 0 || o.mix.Invalidate > 20:
		return o, errors.New("-fail must be in [0, 50], -garbage in [0, 15] and -invalidate in [0, 20]")
	case o.workers < 2:
		return o, errors.New("-workers must be at least 2: the promises are about processes")
	case o.retries < 0:
		return o, errors.New("-retries must not be negative")
	}
	if o.seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		o.seed = max(binary.LittleEndian.Uint64(b[:])>>1, 1)
	}
	return o, nil
}

// clusterFaults are the server's faults that act on a Cluster: a pause of
// one master, and a failover of one.
const clusterFaults = "pause,failover"

// summary is what a run prints, and writes as summary.json.
type summary struct {
	Command    string         `json:"command"`
	Seed       uint64         `json:"seed"`
	Server     string         `json:"server"`
	Duration   string         `json:"duration"`
	Processes  int            `json:"processes"` // crashed workers' replacements included
	Operations map[string]int `json:"operations"`
	Unknown    int            `json:"unknown"` // operations whose outcome is unknown
	Faults     map[string]int `json:"faults"`
	Failpoints map[string]int `json:"failpoints"`
	Checked    map[string]int `json:"checked"`
	Excused    map[string]int `json:"excused"`
	Violations int            `json:"violations"`
	Known      int            `json:"known"` // of Violations, those in windows an open issue names
	Dir        string         `json:"dir"`
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	o, err := parseFlags(args, stdout)
	if err != nil {
		return err
	}
	dir := o.dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "robustness-"); err != nil {
			return err
		}
	}
	command := strings.TrimSpace("go run ./robustness " + strings.Join(args, " "))
	rounds := 1
	if o.round > 0 && o.round < o.duration {
		rounds = int((o.duration + o.round - 1) / o.round)
	}
	total := &summary{Command: command, Seed: o.seed, Server: o.server, Duration: o.duration.String(), Dir: dir,
		Operations: map[string]int{}, Faults: map[string]int{}, Failpoints: map[string]int{}, Checked: map[string]int{}, Excused: map[string]int{}}
	all := &result{Checked: total.Checked, Excused: total.Excused}
	var reports []string
	failures := 0
	for i := range rounds {
		ro := o
		ro.seed = o.seed + uint64(i)
		ro.duration = min(o.round, o.duration-time.Duration(i)*o.round)
		if rounds == 1 {
			ro.duration = o.duration
		}
		rdir := dir
		if rounds > 1 {
			rdir = filepath.Join(dir, fmt.Sprintf("round%03d", i))
		}
		sum, res, err := runOnce(ctx, ro, rdir, stdout)
		if err != nil {
			return err
		}
		sum.Command = command
		if rounds > 1 {
			sum.Command = fmt.Sprintf("go run ./robustness -server %s -duration %v -seed %d", o.server, ro.duration, ro.seed)
			fmt.Fprintf(stdout, "robustness: round %d of %d (seed %d): %d operations, %d violations (%d known)\n",
				i+1, rounds, ro.seed, total.add(sum), sum.Violations, sum.Known)
		} else {
			total = sum
			total.Command = command
		}
		all.Violations = append(all.Violations, res.Violations...)
		all.Lin = res.Lin
		if len(res.Violations) > 0 {
			reports = append(reports, writeReport(rdir, sum, res))
			failures += len(res.failures())
		} else if rounds > 1 {
			_ = os.RemoveAll(filepath.Join(rdir, "history")) // a round that passed keeps its summary only
		}
	}
	writeSummary(stdout, total, all)
	if rounds > 1 {
		if j, err := json.MarshalIndent(total, "", "  "); err == nil {
			_ = os.WriteFile(filepath.Join(dir, "summary.json"), j, 0o644)
		}
	}
	if len(all.Violations) > 0 {
		if failures > 0 || o.strict {
			return fmt.Errorf("%d violations (%d that no open issue names); seed %d; reports: %s", len(all.Violations), failures, o.seed, strings.Join(reports, " "))
		}
		fmt.Fprintf(stdout, "robustness: every violation is a window an open issue names (-strict fails on them); reports: %s\n", strings.Join(reports, " "))
		return nil
	}
	if o.dir == "" {
		_ = os.RemoveAll(dir)
	}
	return nil
}

// add adds a round's figures to s and returns the round's operations.
func (s *summary) add(r *summary) int {
	n := 0
	for k, v := range r.Operations {
		s.Operations[k] += v
		n += v
	}
	for _, m := range [][2]map[string]int{{s.Faults, r.Faults}, {s.Failpoints, r.Failpoints}, {s.Checked, r.Checked}, {s.Excused, r.Excused}} {
		for k, v := range m[1] {
			m[0][k] += v
		}
	}
	s.Processes += r.Processes
	s.Unknown += r.Unknown
	s.Violations += r.Violations
	s.Known += r.Known
	return n
}

// runOnce starts the servers and the workers, fires the server's faults
// until the end, and checks the history.
func runOnce(ctx context.Context, o options, dir string, log io.Writer) (*summary, *result, error) {
	kind := redistest.Kind(o.server)
	srv, err := nemesis.Launch(kind, filepath.Join(dir, "server"))
	if err != nil {
		return nil, nil, fmt.Errorf("server: %w", err)
	}
	defer srv.Stop()
	dbKind := kind
	if kind == redistest.Cluster {
		dbKind = redistest.Redis8 // the fenced store is one server
	}
	db, err := redistest.Launch(dbKind, filepath.Join(dir, "db"))
	if err != nil {
		return nil, nil, fmt.Errorf("database: %w", err)
	}
	defer db.Stop()
	histDir := filepath.Join(dir, "history")
	if err := os.MkdirAll(histDir, 0o755); err != nil {
		return nil, nil, err
	}
	user, password := "", ""
	faults := o.faults
	if kind == redistest.Miniredis {
		faults = nil // it has none of them
	} else {
		user, password = "robust", "robust-secret"
		if err := nemesis.CreateUser(ctx, srv, user, password); err != nil {
			return nil, nil, fmt.Errorf("ACL user: %w", err)
		}
	}
	fmt.Fprintf(log, "robustness: seed %d, %s, %d workers, %v, dir %s\n", o.seed, kind, o.workers, o.duration, dir)

	until := time.Now().Add(o.duration + 2*time.Second) // the workers take a second or two to start
	prefix := fmt.Sprintf("rb%d", o.seed%100000)
	base := workerConfig{Until: until.UnixNano(), Server: srv.Addrs()[0], User: user, Password: password,
		DB: db.Addrs()[0], Prefix: prefix, Mix: o.mix, Sabotage: o.sabotage, Retries: o.retries}
	if kind == redistest.Cluster {
		base.Cluster = srv.Addrs()
	}
	procs := &fleet{dir: dir, histDir: histDir, base: base, seed: o.seed, until: until}
	for i := range o.workers {
		if err := procs.start(fmt.Sprintf("w%d", i), i%2 == 0); err != nil {
			procs.kill()
			return nil, nil, err
		}
	}

	coord, err := newRecorder(filepath.Join(histDir, "coord.jsonl"), "coord")
	if err != nil {
		procs.kill()
		return nil, nil, err
	}
	fctx, cancel := context.WithDeadline(ctx, until)
	var wg sync.WaitGroup
	if len(faults) > 0 {
		wg.Go(func() { serverFaults(fctx, srv, faults, o.seed, coord, log) })
	}
	procs.wait(ctx)
	cancel()
	wg.Wait()
	_ = coord.close()
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}

	h, err := readHistory(histDir)
	if err != nil {
		return nil, nil, err
	}
	h.prefix = prefix
	if err := readStore(ctx, db, prefix, h); err != nil {
		return nil, nil, fmt.Errorf("reading the fenced store: %w", err)
	}
	res := check(h, checkOptions{nearBound: o.nearBound, linTimeout: 30 * time.Second, skip: o.skip, cap: o.mix.Cap})
	for _, p := range procs.failed {
		res.violate("processes", p)
	}
	return summarize(o, h, res, procs, dir), res, nil
}

// serverFaults fires the server's faults one after another, a second or
// two apart, each for 100 ms to 1.5 s, recording each. A fault the server
// cannot undergo (nemesis.ErrUnsupported) is said once and left out.
func serverFaults(ctx context.Context, srv *redistest.Server, faults []nemesis.Fault, seed uint64, rec *recorder, log io.Writer) {
	r := mrand.New(mrand.NewPCG(seed, 0x5e7))
	faults = slices.Clone(faults)
	// The faults' own choices (which master, which mode) follow the seed.
	opts := &nemesis.Options{Rand: mrand.New(mrand.NewPCG(seed, 0xfa17))}
	for len(faults) > 0 && pause(ctx, time.Duration(1000+r.IntN(2000))*time.Millisecond) {
		i := r.IntN(len(faults))
		f := faults[i]
		d := time.Duration(100+r.IntN(1400)) * time.Millisecond
		nr, err := nemesis.Run(context.WithoutCancel(ctx), f, srv, d, opts)
		out := Record{Kind: kFault, ID: rec.nextID(), Name: string(f), Call: nr.Start.UnixNano(), Return: nr.End.UnixNano(), Detail: nr.Detail}
		if errors.Is(err, nemesis.ErrUnsupported) {
			fmt.Fprintf(log, "robustness: left out: %v\n", err)
			faults = slices.Delete(faults, i, i+1)
			continue
		}
		if nr.Start.IsZero() {
			continue // not injected
		}
		if err != nil {
			out.Err = err.Error()
			if errors.Is(err, nemesis.ErrNotRestored) {
				fmt.Fprintf(log, "robustness: the server was not restored after %s: %v\n", f, err)
				rec.write(out)
				return
			}
		}
		rec.write(out)
	}
}

// readStore reads the fenced counters and their logs from the database.
func readStore(ctx context.Context, db *redistest.Server, prefix string, h *history) error {
	c := db.NewClient()
	defer c.Close()
	for n := range counters {
		keys := counterKeys(prefix, n)
		v, err := c.Get(ctx, keys[0]).Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		log, err := c.LRange(ctx, keys[2], 0, -1).Result()
		if err != nil {
			return err
		}
		h.counters = append(h.counters, v)
		h.store = append(h.store, log)
	}
	return nil
}

// fleet is the worker processes, and their replacements.
type fleet struct {
	dir, histDir string
	base         workerConfig
	seed         uint64
	until        time.Time

	mu       sync.Mutex
	wg       sync.WaitGroup
	cmds     []*exec.Cmd
	started  int
	restarts map[string]int
	failed   []string // what each process that failed said
}

func (f *fleet) start(name string, near bool) error {
	cfg := f.base
	f.mu.Lock()
	f.started++
	cfg.Seed = f.seed ^ uint64(f.started)*0x9e3779b97f4a7c15
	f.mu.Unlock()
	cfg.Proc, cfg.Near = name, near
	cfg.History = filepath.Join(f.histDir, name+".jsonl")
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	stderr, err := os.Create(filepath.Join(f.dir, name+".stderr"))
	if err != nil {
		return err
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envWorker+"="+string(b))
	cmd.Stdout, cmd.Stderr = stderr, stderr
	if err := cmd.Start(); err != nil {
		_ = stderr.Close()
		return err
	}
	f.mu.Lock()
	f.cmds = append(f.cmds, cmd)
	f.mu.Unlock()
	f.wg.Go(func() {
		err := cmd.Wait()
		_ = stderr.Close()
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee) && ee.ExitCode() == crashExit:
			if time.Until(f.until) > 2*time.Second {
				f.mu.Lock()
				if f.restarts == nil {
					f.restarts = map[string]int{}
				}
				root, _, _ := strings.Cut(name, ".")
				f.restarts[root]++
				next := fmt.Sprintf("%s.%d", root, f.restarts[root])
				f.mu.Unlock()
				if err := f.start(next, near); err != nil {
					f.fail(fmt.Sprintf("%s: could not start its replacement: %v", name, err))
				}
			}
		default:
			out, _ := os.ReadFile(filepath.Join(f.dir, name+".stderr"))
			f.fail(fmt.Sprintf("%s exited: %v: %s", name, err, tail(string(out), 4000)))
		}
	})
	return nil
}

func (f *fleet) fail(msg string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = append(f.failed, msg)
}

// wait waits for every process (replacements too), killing them all if
// ctx ends or they overrun the deadline by a minute.
func (f *fleet) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { f.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		f.kill()
		<-done
	case <-time.After(time.Until(f.until) + time.Minute):
		f.fail("the workers did not end a minute after the deadline: killed")
		f.kill()
		<-done
	}
}

func (f *fleet) kill() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.cmds {
		if c.Process != nil {
			_ = c.Process.Kill()
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func summarize(o options, h *history, res *result, f *fleet, dir string) *summary {
	s := &summary{Seed: o.seed, Server: o.server, Duration: o.duration.String(), Processes: f.started,
		Operations: map[string]int{}, Faults: map[string]int{}, Failpoints: map[string]int{},
		Checked: res.Checked, Excused: res.Excused, Violations: len(res.Violations), Known: len(res.Violations) - len(res.failures()), Dir: dir}
	for _, r := range h.ops {
		s.Operations[r.Kind]++
		if r.Return == 0 {
			s.Unknown++
		}
	}
	s.Operations[kLoad] = len(h.loads)
	for _, r := range h.faults {
		name := r.Name
		if r.Proc == "coord" {
			name = "server " + name
		}
		s.Faults[name]++
	}
	for _, r := range h.failpoints {
		s.Failpoints[r.Name+" "+r.Detail]++
	}
	return s
}

func writeSummary(w io.Writer, s *summary, res *result) {
	fmt.Fprintf(w, "%s\nseed %d · %s · %s · %d processes\n", s.Command, s.Seed, s.Server, s.Duration, s.Processes)
	section := func(title string, m map[string]int) {
		keys := make([]string, 0, len(m))
		total := 0
		for k, v := range m {
			keys = append(keys, k)
			total += v
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "%s (%d):\n", title, total)
		for _, k := range keys {
			fmt.Fprintf(w, "  %-44s %8d\n", k, m[k])
		}
	}
	section("operations", s.Operations)
	fmt.Fprintf(w, "  %-44s %8d\n", "(outcome unknown)", s.Unknown)
	section("faults fired", s.Faults)
	section("failpoints fired", s.Failpoints)
	section("checked", s.Checked)
	section("excused (windows the docs name)", s.Excused)
	byCheck := map[string]int{}
	for _, v := range res.Violations {
		if v.Known != "" {
			byCheck[v.Check+" (known: "+v.Known+")"]++
			continue
		}
		byCheck[v.Check]++
	}
	section("violations", byCheck)
	for i, v := range res.Violations {
		if i == 10 {
			fmt.Fprintf(w, "  … %d more in the report\n", len(res.Violations)-10)
			break
		}
		known := ""
		if v.Known != "" {
			known = " (known)"
		}
		fmt.Fprintf(w, "  [%s]%s %s\n", v.Check, known, v.Message)
	}
}

// writeReport writes report.md and summary.json, and Porcupine's
// visualisations, in dir; it returns the report's path.
func writeReport(dir string, s *summary, res *result) string {
	path := filepath.Join(dir, "report.md")
	var b strings.Builder
	fmt.Fprintf(&b, "# Robustness run: %d violations\n\nReplay: `%s -seed %d` (timing differs between runs; the seed fixes the traffic and failpoint schedules).\n\n", len(res.Violations), s.Command, s.Seed)
	for _, v := range res.Violations {
		fmt.Fprintf(&b, "## [%s] %s\n\n", v.Check, v.Message)
		if v.Known != "" {
			fmt.Fprintf(&b, "Known: %s.\n\n", v.Known)
		}
		for _, r := range v.Records {
			fmt.Fprintf(&b, "    %s\n", describe(r))
		}
		b.WriteString("\n")
	}
	for _, p := range writeLinReports(dir, res) {
		fmt.Fprintf(&b, "Porcupine: %s\n", p)
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
	if j, err := json.MarshalIndent(s, "", "  "); err == nil {
		_ = os.WriteFile(filepath.Join(dir, "summary.json"), j, 0o644)
	}
	return path
}
