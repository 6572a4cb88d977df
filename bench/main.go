// Command bench measures what stampede changes when many processes need
// the same expensive value at once, next to the approaches services
// usually take: naive cache-aside, in-process singleflight, and a
// hand-written lock with a 50 ms poll loop.
//
//	go run ./bench                 # every scenario on an embedded server, under 2 minutes
//	go run ./bench -quick          # the same, smaller, in a few seconds
//	REDIS_URL=redis://localhost:6379 go run ./bench -scenarios cold,hot
//
// Processes are real: the bench starts itself again as worker processes
// ("pods") that connect to the server on their own. It prints a table and
// writes results.json, report.md and PNG plots to -out (bench/out).
package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/bench/scenarios"
	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

func main() {
	if scenarios.IsPod() {
		os.Exit(scenarios.PodMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case err != nil:
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// options are the parsed flags.
type options struct {
	cfg       scenarios.Config
	scenarios []string
	url, out  string
}

// defaults returns the configuration of a full run, or of a quick one.
func defaults(quick bool) scenarios.Config {
	if quick {
		return scenarios.Config{Procs: 3, Goroutines: 8, Load: 30 * time.Millisecond, Rate: 300,
			Duration: 1200 * time.Millisecond, TTL: 300 * time.Millisecond, Quick: true,
			HitDuration: 300 * time.Millisecond, LockDuration: 250 * time.Millisecond, LargeIters: 20,
			ScaleProcs: []int{1, 2, 4}, ScaleKeys: []int{1, 100, 1000}, ScaleLoad: 10 * time.Millisecond,
			CoherenceCycles: 30, MemEntries: 10_000, FloodKeys: 50_000, FloodMax: 5_000,
			GapShapes: []scenarios.GapShape{{Procs: 3, Goroutines: 16}}, Reps: 1, LockGoroutines: 4,
			PageRate: 600, PagePhase: 500 * time.Millisecond, PageRender: 30 * time.Millisecond,
			BatchKeys: 300, BatchSpread: 100 * time.Millisecond, BatchLead: 500 * time.Millisecond, BatchRate: 3000,
			BatchLoad: 20 * time.Millisecond, BatchWindow: 100 * time.Millisecond, BatchMax: 100}
	}
	return scenarios.Config{Procs: 4, Goroutines: 32, Load: 100 * time.Millisecond, Rate: 400,
		Duration: 5 * time.Second, TTL: time.Second,
		HitDuration: 1500 * time.Millisecond, LockDuration: time.Second, LargeIters: 200,
		ScaleProcs: []int{1, 2, 4, 8}, ScaleKeys: []int{1, 100, 10000}, ScaleLoad: 20 * time.Millisecond,
		CoherenceCycles: 170, MemEntries: 100_000, FloodKeys: 300_000, FloodMax: 100_000,
		GapShapes: []scenarios.GapShape{{Procs: 4, Goroutines: 64}, {Procs: 8, Goroutines: 32}}, Reps: 3, LockGoroutines: 8,
		PageRate: 2000, PagePhase: 2 * time.Second, PageRender: 50 * time.Millisecond,
		BatchKeys: 1000, BatchSpread: 100 * time.Millisecond, BatchLead: time.Second, BatchRate: 10000,
		BatchLoad: 20 * time.Millisecond, BatchWindow: 100 * time.Millisecond, BatchMax: 100}
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	full := defaults(false)
	var (
		procs      = fs.Int("procs", full.Procs, "P: worker processes in the cache scenarios")
		goroutines = fs.Int("goroutines", full.Goroutines, "G: goroutines per process in the cold stampede")
		load       = fs.Duration("load", full.Load, "L: how long the loader takes")
		rate       = fs.Float64("rate", full.Rate, "hot key: requests per second, all processes together")
		duration   = fs.Duration("duration", full.Duration, "hot key: how long each approach runs")
		ttl        = fs.Duration("ttl", full.TTL, "hot key: T, how long a loaded value is fresh")
		list       = fs.String("scenarios", strings.Join(scenarios.Names(), ","), "comma-separated scenarios to run: "+strings.Join(scenarios.Names(), ", "))
		url        = fs.String("redis", os.Getenv("REDIS_URL"), "server URL (redis://host:port); empty: an embedded miniredis. Default: $REDIS_URL")
		out        = fs.String("out", filepath.Join("bench", "out"), "output folder")
		flood      = fs.Int("flood", full.FloodKeys, "near memory: distinct keys read through the flooded near cache")
		quick      = fs.Bool("quick", false, "a run of a few seconds (smaller defaults for every flag not given)")
		reps       = fs.Int("reps", full.Reps, "cold-gap, lock-gap: runs per approach (medians are reported)")
		pageRate   = fs.Float64("page-rate", full.PageRate, "purge: requests per second for the hot page, all processes together")
		pagePhase  = fs.Duration("page-phase", full.PagePhase, "purge: how long each phase (steady, after each purge) lasts")
		pageRender = fs.Duration("page-render", full.PageRender, "purge: how long the page takes to render")
	)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./bench [flags]\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg := defaults(*quick)
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "procs":
			cfg.Procs = *procs
		case "goroutines":
			cfg.Goroutines = *goroutines
		case "load":
			cfg.Load = *load
		case "rate":
			cfg.Rate = *rate
		case "duration":
			cfg.Duration = *duration
		case "ttl":
			cfg.TTL = *ttl
		case "flood":
			cfg.FloodKeys = *flood
		case "reps":
			cfg.Reps = *reps
		case "page-rate":
			cfg.PageRate = *pageRate
		case "page-phase":
			cfg.PagePhase = *pagePhase
		case "page-render":
			cfg.PageRender = *pageRender
		}
	})
	o := options{cfg: cfg, url: *url, out: *out}
	for _, s := range strings.Split(*list, ",") {
		s = strings.TrimSpace(s)
		switch {
		case s == "":
		case !slices.Contains(scenarios.Names(), s):
			return o, fmt.Errorf("unknown scenario %q (have %s)", s, strings.Join(scenarios.Names(), ", "))
		case !slices.Contains(o.scenarios, s):
			o.scenarios = append(o.scenarios, s)
		}
	}
	switch {
	case len(o.scenarios) == 0:
		return o, errors.New("no scenario selected")
	case cfg.Procs < 1 || cfg.Procs > 64:
		return o, fmt.Errorf("-procs %d: want 1 to 64", cfg.Procs)
	case cfg.Goroutines < 1 || cfg.Goroutines > 4096:
		return o, fmt.Errorf("-goroutines %d: want 1 to 4096", cfg.Goroutines)
	case cfg.Load < time.Millisecond:
		return o, fmt.Errorf("-load %v: want at least 1ms", cfg.Load)
	case cfg.TTL <= 2*cfg.Load:
		return o, fmt.Errorf("-ttl %v must exceed twice -load %v, or expiries cannot be told apart", cfg.TTL, cfg.Load)
	case cfg.Duration < 2*cfg.TTL:
		return o, fmt.Errorf("-duration %v must be at least twice -ttl %v", cfg.Duration, cfg.TTL)
	case cfg.FloodKeys < cfg.FloodMax || cfg.FloodKeys > 10_000_000:
		return o, fmt.Errorf("-flood %d: want from %d (the flooded near cache's size) to 10000000", cfg.FloodKeys, cfg.FloodMax)
	case cfg.Reps < 1 || cfg.Reps > 100:
		return o, fmt.Errorf("-reps %d: want 1 to 100", cfg.Reps)
	case !(cfg.Rate >= float64(cfg.Procs)) || cfg.Rate > 1e5:
		return o, fmt.Errorf("-rate %v: want from -procs (%d) to 100000", cfg.Rate, cfg.Procs)
	case !(cfg.PageRate >= float64(cfg.Procs)) || cfg.PageRate > 1e5:
		return o, fmt.Errorf("-page-rate %v: want from -procs (%d) to 100000", cfg.PageRate, cfg.Procs)
	case cfg.PageRender < time.Millisecond:
		return o, fmt.Errorf("-page-render %v: want at least 1ms", cfg.PageRender)
	case cfg.PagePhase < 4*cfg.PageRender:
		return o, fmt.Errorf("-page-phase %v must be at least 4 × -page-render %v, so that a purge's render ends within its phase", cfg.PagePhase, cfg.PageRender)
	}
	return o, nil
}

// run is the whole bench, with its output going to stdout (the tables)
// and stderr (progress).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	cfg := o.cfg
	load0 := loadAvg()
	res := &report.Results{
		Started: time.Now(),
		Command: strings.TrimSpace("go run ./bench " + strings.Join(args, " ")),
		Machine: report.Machine{GOOS: runtime.GOOS, GOARCH: runtime.GOARCH, CPUs: runtime.NumCPU(), Go: runtime.Version(), CPU: cpuModel()},
		Config: report.Config{Procs: cfg.Procs, Goroutines: cfg.Goroutines, LoadMs: ms(cfg.Load), Rate: cfg.Rate,
			DurationS: cfg.Duration.Seconds(), TTLms: ms(cfg.TTL), Quick: cfg.Quick,
			ScaleProcs: cfg.ScaleProcs, ScaleKeys: cfg.ScaleKeys, ScaleLoadMs: ms(cfg.ScaleLoad),
			CoherenceCycles: cfg.CoherenceCycles, MemEntries: cfg.MemEntries, FloodKeys: cfg.FloodKeys, FloodMax: cfg.FloodMax,
			Reps: cfg.Reps, PageRate: cfg.PageRate, PagePhaseS: cfg.PagePhase.Seconds(), PageRenderMs: ms(cfg.PageRender)},
		Scenarios: o.scenarios,
	}

	rdb, url, closeServer, err := open(ctx, o.url)
	if err != nil {
		return err
	}
	defer closeServer()
	res.Server = report.Server{Kind: "external", Addr: rdb.Options().Addr}
	if o.url == "" {
		res.Server.Kind = "embedded miniredis"
	}
	// The capability probe is the first round trip: it also tells whether
	// the server answers.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	var caps lock.Capabilities
	lc, err := lock.New(rdb, nil)
	if err == nil {
		caps, err = lc.Capabilities(pctx)
	}
	cancel()
	if err != nil {
		return fmt.Errorf("server %s: %w", res.Server.Addr, err)
	}
	res.Server.Capabilities = caps.String()

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the bench binary to start pods: %w", err)
	}
	pods := scenarios.NewPods(exe, url)
	defer pods.Close(0)

	var selected []scenarios.Scenario
	steps := 0
	for _, s := range scenarios.All() {
		if slices.Contains(o.scenarios, s.Name) {
			selected = append(selected, s)
			steps += s.Steps(cfg)
		}
	}
	progress := report.NewProgress(stderr, isTerminal(stderr), steps)
	defer progress.Close()
	fmt.Fprintf(stderr, "stampede bench: %s (%s), %d processes, scenarios %s\n",
		res.Server.Capabilities, res.Server.Kind, cfg.Procs, strings.Join(o.scenarios, ","))

	env := &scenarios.Env{Cfg: cfg, RDB: rdb, Pods: pods, Progress: progress, RunID: runID(), Caps: caps, Embedded: o.url == ""}
	runErr := func() error {
		for _, s := range selected {
			if err := s.Run(ctx, env, res); err != nil {
				return fmt.Errorf("%s: %w", s.Title, err)
			}
			if err := env.Cleanup(ctx); err != nil {
				return fmt.Errorf("clean up after %s: %w", s.Title, err)
			}
		}
		return nil
	}()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := env.Cleanup(cctx); err != nil && runErr == nil {
		runErr = fmt.Errorf("clean up: %w", err)
	}
	grace := 5 * time.Second
	if runErr != nil {
		grace = 0 // a pod may be stuck in a job: do not wait for it
	}
	pods.Close(grace)
	progress.Close()
	if runErr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("interrupted: %w", context.Cause(ctx))
		}
		return runErr
	}
	res.ElapsedS = time.Since(res.Started).Seconds()
	if start, end := load0, loadAvg(); start != "" && end != "" {
		res.Machine.Load = start + " at the start, " + end + " at the end"
	}

	if err := os.MkdirAll(o.out, 0o755); err != nil {
		return err
	}
	if err := report.WritePlots(o.out, res); err != nil {
		return err
	}
	if err := report.WriteJSON(o.out, res); err != nil {
		return err
	}
	if err := report.WriteMarkdown(o.out, res); err != nil {
		return err
	}
	if err := report.WriteText(stdout, res); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s in %s\n", strings.Join(append([]string{"results.json", "report.md"}, res.Plots...), ", "), o.out)
	return nil
}

// open connects to url, or without one starts the embedded server. It
// returns the URL pods should use.
func open(ctx context.Context, url string) (*redis.Client, string, func(), error) {
	if url == "" {
		return embedded.Open(ctx)
	}
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, "", nil, fmt.Errorf("-redis: %w", err)
	}
	rdb := redis.NewClient(opts)
	return rdb, url, func() { _ = rdb.Close() }, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func runID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().Unix(), 36) + hex.EncodeToString(b[:])
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// loadAvg returns the 1, 5 and 15 minute load averages where the system
// says them, or "".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return ""
}

// cpuModel returns the CPU's model name where the system says it.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
