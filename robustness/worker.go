// This file holds a worker process: its configuration, its clients (all
// but the database's through a fault proxy of its own), the hooks that
// record what the library did for each operation, and its life: traffic
// until the deadline, then quiet, close and the leak checks.

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// envWorker carries a worker's configuration, as JSON; its presence makes
// the binary a worker.
const envWorker = "STAMPEDE_ROBUSTNESS_WORKER"

// crashExit is a worker's exit status when a failpoint crashed it on
// purpose; the coordinator starts another in its place.
const crashExit = 3

// workerConfig is what the coordinator tells a worker.
type workerConfig struct {
	Proc     string   `json:"proc"`
	Seed     uint64   `json:"seed"`
	History  string   `json:"history"`          // the file to append records to
	Until    int64    `json:"until"`            // Unix ns: when traffic stops
	Server   string   `json:"server"`           // the server under test, host:port (a Cluster: its first node)
	Cluster  []string `json:"cluster,omitzero"` // a Cluster's nodes, masters and replicas, host:port
	User     string   `json:"user,omitzero"`
	Password string   `json:"password,omitzero"`
	DB       string   `json:"db"`               // the database: another server, never faulted
	Prefix   string   `json:"prefix"`           // of every key and namespace
	Near     bool     `json:"near"`             // the exp and http caches have the near cache
	Retries  int      `json:"retries,omitzero"` // go-redis retries of the server's client (MaxRetries; MaxRedirects on a Cluster); 0: none
	Mix      mix      `json:"mix"`
	Sabotage []string `json:"sabotage,omitzero"`
}

// mix says which traffic and which faults a worker makes.
type mix struct {
	Proxy      bool `json:"proxy"`      // faults of the worker's own proxy
	Failpoints bool `json:"failpoints"` // pauses at the library's failpoints
	Crash      bool `json:"crash"`      // crashes at the library's failpoints
	Lin        int  `json:"lin"`        // goroutines on the lin namespace
	Exp        int  `json:"exp"`        // goroutines on the exp namespace
	Locks      int  `json:"locks"`      // fenced lock goroutines
	HTTP       int  `json:"http"`       // HTTP client goroutines
	Fail       int  `json:"fail"`       // percent of loader runs that fail (as many again panic or outlive LoadTimeout, a quarter each)
	Garbage    int  `json:"garbage"`    // percent of exp operations that write bytes no cache can decode
	Invalidate int  `json:"invalidate"` // percent of exp operations that invalidate a tag (three in five hard, the others soft)
	Cap        int  `json:"cap"`        // fleet-wide cap on exp's concurrent loads (backend "robust"); 0: none
}

// backends caps exp's loads at Mix.Cap ("robust"); sabotaged, at three
// times that, while the checker holds it to Mix.Cap.
func (w *worker) backends() map[string]int {
	if w.cfg.Mix.Cap <= 0 {
		return nil
	}
	if w.cfg.sabotaged("cap") {
		return map[string]int{"robust": 3 * w.cfg.Mix.Cap}
	}
	return map[string]int{"robust": w.cfg.Mix.Cap}
}

// backend is exp's default backend: "robust" when capped.
func (w *worker) backend() string {
	if w.cfg.Mix.Cap <= 0 {
		return ""
	}
	return "robust"
}

func (c workerConfig) sabotaged(name string) bool {
	for _, s := range c.Sabotage {
		if s == name {
			return true
		}
	}
	return false
}

// Key spaces: few keys, so that operations meet.
const (
	linKeys = 6
	expKeys = 8
)

// Cache tuning: short enough that expiries, claims lost to pauses and
// fail-open periods happen many times a minute.
const (
	lockTTL     = 500 * time.Millisecond
	loadTimeout = 700 * time.Millisecond
	waitTimeout = 2 * time.Second
	poll        = 100 * time.Millisecond
	cooldown    = 300 * time.Millisecond
	expTTL      = 300 * time.Millisecond
	expStale    = 400 * time.Millisecond
	nearLease   = 200 * time.Millisecond
	opTimeout   = 3 * time.Second
)

// worker is one worker process.
type worker struct {
	cfg     workerConfig
	rec     *recorder
	proxies *faultproxy.Set       // one proxy per node of the server
	rc      redis.UniversalClient // through proxies; a ClusterClient on a Cluster
	raw     redis.UniversalClient // straight to the server: what it holds, unfaulted (and the garbage writes)
	db      *redis.Client         // the database, direct
	lin     *cache.Cache          // namespace lin: no near cache, values live an hour
	exp     *cache.Cache          // namespace exp: short TTL and stale window, near cache if cfg.Near
	locks   *lock.Client
	web     *web
	httpOps sync.Map // ID → *opInfo: the HTTP operations in flight (see linkOp)
}

// opKey is the context key of an operation's opInfo.
type opKey struct{}

// opInfo is an operation in flight: its ID, and what the Observer said
// of it.
type opInfo struct {
	id    int64
	mu    sync.Mutex
	flags map[string][]string
}

func (o *opInfo) flag(key, what string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.flags == nil {
		o.flags = map[string][]string{}
	}
	for _, f := range o.flags[key] {
		if f == what {
			return
		}
	}
	o.flags[key] = append(o.flags[key], what)
}

func (o *opInfo) snapshot() map[string][]string {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.flags) == 0 {
		return nil
	}
	out := make(map[string][]string, len(o.flags))
	for k, v := range o.flags {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func infoOf(ctx context.Context) *opInfo {
	i, _ := ctx.Value(opKey{}).(*opInfo)
	return i
}

// observe is every Cache's Observer: it notes, on the operation whose
// context the event carries, what happened to which key.
func observe(ev cache.Event) {
	info := infoOf(ev.Context)
	if info == nil {
		return
	}
	switch ev.Kind {
	case cache.EventHit:
		what := "hit"
		if ev.Near {
			what = "nearhit"
		}
		info.flag(ev.Key, what)
	case cache.EventStale:
		info.flag(ev.Key, "stale")
	case cache.EventWait:
		info.flag(ev.Key, "wait")
	case cache.EventFailOpen:
		info.flag(ev.Key, "failopen")
	case cache.EventLoad:
		info.flag(ev.Key, "load")
	}
}

func workerMain() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(envWorker)), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "robustness worker: config:", err)
		return 2
	}
	if err := runWorker(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "robustness worker %s: %v\n", cfg.Proc, err)
		return 1
	}
	return 0
}

func runWorker(cfg workerConfig) error {
	rec, err := newRecorder(cfg.History, cfg.Proc)
	if err != nil {
		return err
	}
	stopFlush := make(chan struct{})
	flushed := make(chan struct{})
	go func() { defer close(flushed); rec.flusher(stopFlush) }()
	defer func() { close(stopFlush); <-flushed; _ = rec.close() }()

	goroutinesBefore := runtime.NumGoroutine()
	w := &worker{cfg: cfg, rec: rec}
	if err := w.open(); err != nil {
		w.close()
		return err
	}
	if cfg.Mix.Failpoints || cfg.Mix.Crash {
		disable := w.enableFailpoints()
		defer disable()
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, cfg.Until))
	defer cancel()
	w.traffic(ctx)

	// Quiet: every background refresh and announcement ends within a few
	// LoadTimeouts once traffic has stopped.
	conns := w.rc.PoolStats().TotalConns
	w.close()
	end := map[string]int{"goroutinesBefore": goroutinesBefore, "connsDuringRun": int(conns)}
	end["goroutinesAfter"] = settle(goroutinesBefore)
	end["connsAfter"] = int(w.rc.PoolStats().TotalConns + w.db.PoolStats().TotalConns + w.raw.PoolStats().TotalConns)
	rec.write(Record{Kind: kEnd, ID: rec.nextID(), Call: now(), Return: now(), Counts: end,
		Detail: stacksIf(end["goroutinesAfter"] > goroutinesBefore)})
	return nil
}

// settle waits up to 5 s for the goroutine count to come back to before,
// and returns the count.
func settle(before int) int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := runtime.NumGoroutine()
		if n <= before || time.Now().After(deadline) {
			return n
		}
		time.Sleep(20 * time.Millisecond) // goroutines ending give no signal
	}
}

func stacksIf(ok bool) string {
	if !ok {
		return ""
	}
	buf := make([]byte, 1<<20)
	return string(buf[:runtime.Stack(buf, true)])
}

func (w *worker) open() error {
	var err error
	// No retries by default: go-redis sends a command that timed out
	// again, and the first send may still be applied (a paused server
	// answers it late), so that one Set is applied twice with other
	// writes between, which no caller of the cache can tell.
	retries := -1
	if w.cfg.Retries > 0 {
		retries = w.cfg.Retries
	}
	if len(w.cfg.Cluster) > 0 {
		// Every connection to every node, topology refreshes and the
		// near cache's included, goes through that node's proxy. Without
		// retries (MaxRedirects -1) a command sent to a master that lost
		// its slots fails with MOVED, and the client reloads its slot map.
		if w.proxies, err = faultproxy.StartSet(w.cfg.Cluster...); err != nil {
			return err
		}
		w.rc = redis.NewClusterClient(&redis.ClusterOptions{Addrs: slices.Clone(w.cfg.Cluster), Dialer: w.proxies.Dialer(),
			Username: w.cfg.User, Password: w.cfg.Password, PoolSize: 32,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1, MaxRedirects: retries})
		w.raw = redis.NewClusterClient(&redis.ClusterOptions{Addrs: slices.Clone(w.cfg.Cluster), Username: w.cfg.User, Password: w.cfg.Password, PoolSize: 8})
	} else {
		if w.proxies, err = faultproxy.StartSet(w.cfg.Server); err != nil {
			return err
		}
		w.rc = redis.NewClient(&redis.Options{Addr: w.proxies.For(w.cfg.Server).Addr(), Username: w.cfg.User, Password: w.cfg.Password,
			PoolSize: 32, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: retries})
		w.raw = redis.NewClient(&redis.Options{Addr: w.cfg.Server, Username: w.cfg.User, Password: w.cfg.Password, PoolSize: 8})
	}
	w.rc.AddHook(errorHook{})
	w.db = redis.NewClient(&redis.Options{Addr: w.cfg.DB, PoolSize: 32})
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	w.lin, err = cache.New(w.rc, &cache.Options{
		Namespace: w.cfg.Prefix + ":lin",
		Expiry:    cache.ExpiryPolicy{Fresh: time.Hour},
		LockTTL:   lockTTL, LoadTimeout: loadTimeout, WaitTimeout: waitTimeout,
		PollInterval: poll, FailOpenCooldown: cooldown, DigestThreshold: 256,
		Observer: observe, Logger: logger,
	})
	if err != nil {
		return err
	}
	var near *cache.Near
	if w.cfg.Near {
		near = &cache.Near{MaxEntries: 64, Lease: nearLease}
	}
	w.exp, err = cache.New(w.rc, &cache.Options{
		Namespace: w.cfg.Prefix + ":exp",
		Expiry:    cache.ExpiryPolicy{Fresh: expTTL, Stale: expStale, Negative: expTTL, RefreshBackoff: 100 * time.Millisecond},
		LockTTL:   lockTTL, LoadTimeout: loadTimeout, WaitTimeout: waitTimeout,
		PollInterval: poll, FailOpenCooldown: cooldown, DigestThreshold: 256,
		Near: near, Observer: observe, Logger: logger,
		Backends: w.backends(), Backend: w.backend(),
	})
	if err != nil {
		return err
	}
	if w.locks, err = lock.New(w.rc, nil); err != nil {
		return err
	}
	if w.web, err = w.openWeb(logger, near); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return w.db.Ping(ctx).Err()
}

func (w *worker) close() {
	if w.web != nil {
		w.web.close()
	}
	for _, c := range []*cache.Cache{w.lin, w.exp} {
		if c != nil {
			_ = c.Close()
		}
	}
	if w.locks != nil {
		w.locks.Close()
	}
	if w.rc != nil {
		_ = w.rc.Close()
	}
	if w.db != nil {
		_ = w.db.Close()
	}
	if w.raw != nil {
		_ = w.raw.Close()
	}
	if w.proxies != nil {
		_ = w.proxies.Close()
	}
}

// traffic runs every traffic goroutine and the proxy's faults until ctx
// ends.
func (w *worker) traffic(ctx context.Context) {
	var wg sync.WaitGroup
	seq := uint64(0)
	spawn := func(n int, fn func(ctx context.Context, r *rand.Rand)) {
		for range n {
			seq++
			r := rand.New(rand.NewPCG(w.cfg.Seed, seq))
			wg.Go(func() { fn(ctx, r) })
		}
	}
	spawn(w.cfg.Mix.Lin, w.linTraffic)
	spawn(w.cfg.Mix.Exp, w.expTraffic)
	spawn(w.cfg.Mix.Locks, w.lockTraffic)
	spawn(w.cfg.Mix.HTTP, w.httpTraffic)
	spawn(w.cfg.Mix.Locks, w.runOnceTraffic)
	if w.cfg.Mix.Proxy {
		spawn(1, w.proxyFaults)
	}
	wg.Wait()
}

// pause waits d, or returns false when ctx ends first.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// begin records the start of an operation and returns its context (with
// its opInfo) and record, to be completed and passed to end.
func (w *worker) begin(ctx context.Context, r Record) (context.Context, *opInfo, Record) {
	info := &opInfo{id: w.rec.nextID()}
	r.ID, r.Call = info.id, now()
	w.rec.write(r)
	return context.WithValue(ctx, opKey{}, info), info, r
}

// end records an operation's outcome.
func (w *worker) end(info *opInfo, r Record, err error) {
	r.Return = now()
	if err != nil {
		r.Err, r.ErrKind = err.Error(), errKind(err)
	}
	r.Flags = info.snapshot()
	w.rec.write(r)
}

func errKind(err error) string {
	var pe *loader.PanicError
	switch {
	case errors.Is(err, cache.ErrRemoteLoad):
		return "remote"
	case errors.Is(err, loader.ErrNotFound):
		return "notfound"
	case errors.Is(err, cache.ErrMiss):
		return "miss"
	case errors.Is(err, cache.ErrStale):
		return "stale"
	case errors.Is(err, cache.ErrWaitTimeout):
		return "wait"
	case errors.As(err, &pe):
		return "panic"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return "timeout"
	}
	return "other"
}

// proxyFaults injects faults into the worker's proxies (on a Cluster,
// every node's at once) on a seeded random schedule, recording each.
func (w *worker) proxyFaults(ctx context.Context, r *rand.Rand) {
	proxy := w.proxies.All()
	for pause(ctx, time.Duration(500+r.IntN(1500))*time.Millisecond) {
		rec := Record{Kind: kFault, ID: w.rec.nextID(), Call: now()}
		d := time.Duration(50+r.IntN(600)) * time.Millisecond
		switch r.IntN(6) {
		case 0:
			rec.Name = "latency"
			proxy.SetLatency(time.Duration(1+r.IntN(20)) * time.Millisecond)
			pause(ctx, d)
			proxy.SetLatency(0)
		case 1:
			rec.Name = "spikes"
			proxy.SetSpikes(0.05, time.Duration(50+r.IntN(300))*time.Millisecond)
			pause(ctx, d)
			proxy.SetSpikes(0, 0)
		case 2:
			rec.Name = "blackhole"
			proxy.BlackHole()
			pause(ctx, d)
			proxy.Resume()
		case 3:
			rec.Name = "reset"
			rec.Detail = fmt.Sprint(proxy.Reset(), " connections")
		case 4:
			rec.Name = "drop"
			rec.Detail = fmt.Sprint(proxy.Drop(), " connections")
		case 5:
			rec.Name = "refuse"
			proxy.Refuse()
			pause(ctx, d)
			proxy.Resume()
		}
		rec.Return = now()
		w.rec.write(rec)
	}
	proxy.Resume()
	proxy.SetLatency(0)
	proxy.SetSpikes(0, 0)
}

// value makes a unique value: prefix.proc.id, sometimes padded past the
// digest threshold. readValue strips and checks the padding.
func (w *worker) value(prefix string, id int64, r *rand.Rand) string {
	v := fmt.Sprintf("%s.%s.%d", prefix, w.cfg.Proc, id)
	if r.IntN(5) == 0 {
		v += "|" + strings.Repeat("x", 300+r.IntN(400))
	}
	return v
}

// readValue returns the name of a value read, and an error if its padding
// was damaged.
func readValue(v string) (string, error) {
	name, pad, ok := strings.Cut(v, "|")
	if ok && strings.Trim(pad, "x") != "" {
		return name, fmt.Errorf("value %s: padding damaged", name)
	}
	return name, nil
}

// errorHook flags, on the operation whose context a command carries, that
// one of its server calls failed ("servererror" under the key "*"): the
// cache may then be failing open for it, a window the docs name, even
// when it joined another caller's run and the Observer said nothing.
type errorHook struct{}

func (errorHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (errorHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil {
			err = cmd.Err()
		}
		flagError(ctx, err)
		return err
	}
}

func (errorHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		flagError(ctx, err)
		for _, c := range cmds {
			flagError(ctx, c.Err())
		}
		return err
	}
}

func flagError(ctx context.Context, err error) {
	if err == nil || errors.Is(err, redis.Nil) {
		return
	}
	if info := infoOf(ctx); info != nil {
		info.flag("*", "servererror")
	}
}
