// Command fleet measures what a fleet of processes costs the server when
// each one runs a stampede Cache: how many announcement messages one
// write (Set, Delete, rebuild) delivers, the bytes and server CPU per
// write, and how fast a waiter wakes, for 1 to 64 real processes and for
// each announcement design package cache offers. From the measured
// per-message costs it models fleets of 100, 1,000 and 10,000 instances.
//
//	go run ./bench/fleet                      # the long form, Redis 8.6, a few minutes
//	go run ./bench/fleet -cluster             # the same on a 3-master Cluster
//	go run ./bench/fleet -out /tmp/fleet.txt  # also write the output to a file
//
// It starts its own server ($STAMPEDE_REDIS8, as the tests do) and its
// own worker processes (this binary again, through internal/toolkit/fleet).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
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
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// parseFlags returns the run's configuration, the model's assumptions and
// the output file ("" for none).
func parseFlags(args []string, stderr io.Writer) (config, assumptions, string, error) {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		procs    = fs.String("procs", "1,2,4,8,16,32,64", "fleet sizes (processes), comma-separated, 1 to 64")
		writes   = fs.Int("writes", 1500, "idle phase: writes (a Set, a Delete and a rebuild of each key in turn) per fleet size")
		rate     = fs.Int("rate", 500, "idle phase: writes per second")
		keys     = fs.Int("keys", 100, "idle phase: K, the keys the writes go round")
		rounds   = fs.Int("rounds", 150, "wait phase: rebuilds per fleet size, each with its waiters (0: no wait phase)")
		waiters  = fs.Int("waiters", 4, "wait phase: processes waiting for each rebuilt key (at most N-1)")
		load     = fs.Duration("load", 20*time.Millisecond, "wait phase: the rebuild's loader time (waiters start meanwhile)")
		quiet    = fs.Duration("quiet", 2*time.Second, "quiet phase: how long each fleet is measured without writes (0: none)")
		value    = fs.Int("value", 100, "bytes of each value")
		near     = fs.Bool("near", true, "also measure the last design (the default) with the near cache on in every process")
		hold     = fs.Float64("hold-frac", 0.25, "with -near: fraction of the processes holding each key in their near cache before the writes (at least one)")
		cluster  = fs.Bool("cluster", false, "a 3-master Cluster instead of one server")
		list     = fs.String("designs", strings.Join(designs(), ","), "announcement designs to compare: "+strings.Join(designs(), ", "))
		out      = fs.String("out", "", "also write the output to this file")
		tags     = fs.Bool("tags", false, "measure tag invalidation across a fleet with near caches (issue 40) instead of the announcement designs")
		tKeys    = fs.Int("tag-keys", 10_000, "with -tags: values, key i under tag i mod -tag-count")
		tCount   = fs.Int("tag-count", 100, "with -tags: tags")
		tReaders = fs.Int("tag-readers", 16, "with -tags: reading processes, near caches on, besides the invalidating one")
		tRounds  = fs.Int("tag-rounds", 50, "with -tags: InvalidateTag calls, each followed by a Set, every reader timing when it stops serving the old value")
		tSoft    = fs.Int("tag-soft", 5, "with -tags: SoftInvalidateTag calls, each followed by a read of every value of the tag by every reader")
		tBytes   = fs.Int("tag-bytes-rounds", 300, "with -tags: InvalidateTag calls per fleet of the bytes phase")
		tIdle    = fs.Int("tag-idle", 15, "with -tags: idle processes beside the one reader in the bytes phase")
		tPace    = fs.Duration("tag-pace", 50*time.Microsecond, "with -tags: how long a reader sleeps between polls (0: a tight loop)")
		mRate    = fs.Float64("model-rate", 1000, "model: writes per second across the fleet")
		mFrac    = fs.Float64("model-wait-frac", 0.001, "model: fraction of the instances waiting for a rebuilt key")
		mHold    = fs.Float64("model-hold-frac", 0.01, "model: fraction of the instances holding a written key in their near cache")
		mNIC     = fs.Float64("model-nic", 10, "model: the server's network bandwidth, Gbit/s")
		mOps     = fs.Float64("model-ops", 100_000, "model: messages per second one server core sends, for the ops-based limit")
		mHeld    = fs.Float64("model-held", 10_000, "model: keys each instance holds in its near cache (tracking-table items per instance)")
		mWrites1 = fs.Float64("model-rebuilds", 10_000, "model: a second write rate, per second, for the limits (the issue's 10k rebuilds/s)")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./bench/fleet [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return config{}, assumptions{}, "", err
	}
	if fs.NArg() > 0 {
		return config{}, assumptions{}, "", fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *tags && *cluster {
		return config{}, assumptions{}, "", errors.New("-tags runs on one server, not with -cluster")
	}
	if *tags {
		tc := tagConfig{keys: *tKeys, tags: *tCount, readers: *tReaders, rounds: *tRounds, soft: *tSoft,
			bytesRounds: *tBytes, idle: *tIdle, pace: *tPace, value: *value}
		if err := tc.check(); err != nil {
			return config{}, assumptions{}, "", err
		}
		return config{procs: []int{tc.readers + 1}, value: *value, tag: &tc}, assumptions{}, *out, nil
	}
	cfg := config{writes: *writes, rate: *rate, keys: *keys, rounds: *rounds, waiters: *waiters, load: *load, quiet: *quiet,
		value: *value, near: *near, holdFrac: *hold, cluster: *cluster}
	for _, s := range strings.Split(*procs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 64 {
			return cfg, assumptions{}, "", fmt.Errorf("-procs: %q is not a number from 1 to 64", s)
		}
		if !slices.Contains(cfg.procs, n) {
			cfg.procs = append(cfg.procs, n)
		}
	}
	slices.Sort(cfg.procs)
	for _, d := range strings.Split(*list, ",") {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		if !slices.Contains(designs(), d) {
			return cfg, assumptions{}, "", fmt.Errorf("-designs: unknown %q (have %s)", d, strings.Join(designs(), ", "))
		}
		cfg.designs = append(cfg.designs, d)
	}
	switch {
	case len(cfg.designs) == 0:
		return cfg, assumptions{}, "", errors.New("-designs: none selected")
	case cfg.writes < 3 || cfg.rate < 1 || cfg.keys < 1:
		return cfg, assumptions{}, "", errors.New("-writes must be at least 3, -rate and -keys at least 1")
	case cfg.rounds < 0 || cfg.waiters < 1 || cfg.load < time.Millisecond:
		return cfg, assumptions{}, "", errors.New("-rounds >= 0, -waiters >= 1, -load >= 1ms")
	case cfg.holdFrac <= 0 || cfg.holdFrac > 1 || *mFrac < 0 || *mFrac > 1 || *mHold < 0 || *mHold > 1:
		return cfg, assumptions{}, "", errors.New("-hold-frac in (0, 1], -model-wait-frac and -model-hold-frac in [0, 1]")
	case cfg.value < 1 || cfg.value > 1<<20:
		return cfg, assumptions{}, "", errors.New("-value: want 1 to 1 MiB")
	}
	a := assumptions{rates: []float64{*mRate, *mWrites1}, waitFrac: *mFrac, holdFrac: *mHold, nicBytes: *mNIC * 1e9 / 8,
		opsPerCore: *mOps, sizes: []int{100, 1_000, 10_000}, held: *mHeld}
	return cfg, a, *out, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, a, outPath, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	var file *os.File
	if outPath != "" {
		if file, err = os.Create(outPath); err != nil {
			return err
		}
		defer file.Close()
		stdout = io.MultiWriter(stdout, file)
	}
	started := time.Now()
	load0 := loadAvg()
	ct, err := newController(ctx, cfg)
	if err != nil {
		return err
	}
	defer ct.close()
	fmt.Fprintf(stderr, "fleet: server %s, %d workers started\n", strings.Join(ct.srv.addrs, ","), slices.Max(cfg.procs))
	if cfg.tag != nil {
		tr, err := ct.runTags(ctx, *cfg.tag, func(s string) { fmt.Fprintln(stderr, "fleet:", s) })
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "go run ./bench/fleet %s\n", strings.Join(args, " "))
		fmt.Fprintf(stdout, "%s, %s/%s, %d CPUs (shared with other jobs: times are upper bounds; counts and bytes are exact), Go %s\n",
			time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
		fmt.Fprintf(stdout, "load average %s at the start, %s at the end; run took %.0f s\n\n", load0, loadAvg(), time.Since(started).Seconds())
		printTags(stdout, tr)
		return nil
	}
	pts, err := ct.run(ctx, func(s string) { fmt.Fprintln(stderr, "fleet:", s) })
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "go run ./bench/fleet %s\n", strings.Join(args, " "))
	fmt.Fprintf(stdout, "%s, %s/%s, %d CPUs (shared with other jobs: times and CPU are upper bounds; counts and bytes are exact), Go %s\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(stdout, "load average %s at the start, %s at the end; run took %.0f s\n", load0, loadAvg(), time.Since(started).Seconds())
	fmt.Fprintf(stdout, "server: Redis 8.6 (%s), %d node(s); idle phase: %d writes at %d/s over %d keys, values of %d B; wait phase: %d rebuilds, loader %v, %d processes waiting for each (fewer if N is smaller); near: %.0f%% of the processes hold each written key\n\n",
		serverKind(cfg.cluster), len(ct.srv.addrs), cfg.writes, cfg.rate, cfg.keys, cfg.value, cfg.rounds, cfg.load, cfg.waiters, cfg.holdFrac*100)
	printMeasured(stdout, pts)
	fmt.Fprintln(stdout)
	printQuiet(stdout, pts)
	fmt.Fprintln(stdout)
	printBaseline(stdout, pts)
	fmt.Fprintln(stdout)
	m := fitModel(pts)
	printModel(stdout, m, pts, a)
	return nil
}

func serverKind(cluster bool) string {
	if cluster {
		return "Cluster"
	}
	return "one server"
}

// loadAvg returns the 1, 5 and 15 minute load averages, or "?".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}
