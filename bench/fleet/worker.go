package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/redis/go-redis/v9"
)

// Environment of a worker process (internal/toolkit/fleet starts this binary
// again with these set).
const (
	envWorker  = "FLEET13_WORKER"  // "1" in a worker
	envAddrs   = "FLEET13_ADDRS"   // the server's addresses, comma-separated
	envCluster = "FLEET13_CLUSTER" // "1": the addresses are a Cluster's
)

// isWorker reports whether this process was started as a worker.
func isWorker() bool { return os.Getenv(envWorker) == "1" }

// worker is one process of the fleet: at most one Cache at a time, opened
// and closed on the controller's word, on a client whose connections
// count what the server sends them.
type worker struct {
	addrs   []string
	cluster bool

	outMu sync.Mutex // guards out; the command loop and running waits both write
	out   *bufio.Writer

	counts *connCounts
	rdb    redis.UniversalClient
	c      *cache.Cache
	value  string
	tag    *tagWorker // the tag measurement's state (tagworker.go); nil outside it
}

// workerMain runs this process as a worker until stdin closes and
// returns the exit code. Replies are one line each; a failed command is
// answered "error <text>".
func workerMain() int {
	w := &worker{addrs: strings.Split(os.Getenv(envAddrs), ","), cluster: os.Getenv(envCluster) == "1",
		out: bufio.NewWriter(os.Stdout)}
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) == 0 {
			continue
		}
		if err := w.command(f); err != nil {
			w.say("error %s", strings.ReplaceAll(err.Error(), "\n", " "))
		}
	}
	w.closeCache()
	return 0
}

func (w *worker) say(format string, args ...any) {
	w.outMu.Lock()
	defer w.outMu.Unlock()
	fmt.Fprintf(w.out, format+"\n", args...)
	_ = w.out.Flush()
}

func (w *worker) command(f []string) error {
	ctx := context.Background()
	arg := func(i int) int {
		if i >= len(f) {
			return 0
		}
		n, _ := strconv.Atoi(f[i])
		return n
	}
	switch f[0] {
	case "open": // open <design> <near 0|1> <namespace> <value bytes>
		if len(f) != 5 {
			return fmt.Errorf("open: want 4 arguments, have %q", f[1:])
		}
		if err := w.open(ctx, f[1], f[2] == "1", f[3], arg(4)); err != nil {
			return err
		}
		w.say("ready")
	case "stats":
		if w.c == nil {
			return errors.New("stats: no Cache open")
		}
		st := w.counts.snapshot()
		s := w.c.Stats()
		st.Waits, st.Loads = int64(s.Waits), int64(s.Loads)
		b, _ := json.Marshal(st)
		w.say("stats %s", b)
	case "writes": // writes <n> <per second> <keys>
		start := time.Now()
		errs, first := w.writes(ctx, arg(1), float64(arg(2)), max(1, arg(3)))
		w.say("done %d %d %q", time.Since(start).Nanoseconds(), errs, first)
	case "prefill": // prefill <prefix> <keys>: Set keys prefix0, prefix1, ... (16 at a time)
		keys := arg(2)
		errs := make([]error, 16)
		var wg sync.WaitGroup
		for g := range errs {
			wg.Go(func() {
				for k := g; k < keys && errs[g] == nil; k += len(errs) {
					errs[g] = cache.Set(ctx, w.c, f[1]+strconv.Itoa(k), w.value)
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		w.say("prefilled")
	case "hold": // hold <prefix> <keys> <holders> <n> <i>: read the keys k with (k-i) mod n < holders
		keys, holders, n, i := arg(2), arg(3), max(1, arg(4)), arg(5)
		held := 0
		for k := range keys {
			if ((k-i)%n+n)%n >= holders {
				continue
			}
			if _, err := cache.Get[string](ctx, w.c, f[1]+strconv.Itoa(k)); err != nil {
				return fmt.Errorf("hold %s%d: %w", f[1], k, err)
			}
			held++
		}
		w.say("held %d", held)
	case "rebuild": // rebuild <key> <load ms>; answers "claimed", then "rebuilt <end ns> <error>"
		key, load := f[1], time.Duration(arg(2))*time.Millisecond
		go func() {
			var end time.Time
			_, err := cache.GetOrLoad(ctx, w.c, key, func(context.Context) (string, error) {
				w.say("claimed")
				time.Sleep(load) // the loader's work; waiters start meanwhile
				end = time.Now()
				return w.value, nil
			})
			w.say("rebuilt %d %q", end.UnixNano(), errText(err))
		}()
	case "wait": // wait <key>; answers "waited <return ns> <1 if it waited> <error>"
		key := f[1]
		go func() {
			before := w.c.Stats().Waits
			_, err := cache.GetOrLoad(ctx, w.c, key, func(context.Context) (string, error) {
				return w.value, nil // only if the rebuild was over before this looked
			})
			at := time.Now()
			waited := 0
			if w.c.Stats().Waits > before {
				waited = 1
			}
			w.say("waited %d %d %q", at.UnixNano(), waited, errText(err))
		}()
	case "close":
		w.closeCache()
		w.say("closed")
	default:
		if ok, err := w.tagCommand(ctx, f); ok {
			return err
		}
		return fmt.Errorf("unknown command %q", f[0])
	}
	return nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// open makes the worker's client and Cache, and warms them: the Cache has
// subscribed (New sends SUBSCRIBE before it returns), probed the server
// and run one load of a key of its own.
func (w *worker) open(ctx context.Context, design string, near bool, ns string, valueSize int) error {
	o := &cache.Options{Namespace: ns, Expiry: cache.ExpiryPolicy{Fresh: 10 * time.Minute}}
	if near {
		o.Near = &cache.Near{MaxEntries: 10_000}
	}
	if err := applyDesign(design, o); err != nil {
		return err
	}
	return w.openWith(ctx, o, valueSize, nil)
}

// openWith is open with the Cache's options o, and hook (if not nil) added
// to the client before the Cache is made.
func (w *worker) openWith(ctx context.Context, o *cache.Options, valueSize int, hook redis.Hook) error {
	w.closeCache()
	w.counts = &connCounts{}
	dial := countingDialer(w.counts)
	if w.cluster {
		w.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: w.addrs, Dialer: dial, PoolSize: 4})
	} else {
		w.rdb = redis.NewClient(&redis.Options{Addr: w.addrs[0], Dialer: dial, PoolSize: 4})
	}
	if hook != nil {
		w.rdb.AddHook(hook)
	}
	near := o.Near != nil
	c, err := cache.New(w.rdb, o)
	if err != nil {
		return err
	}
	w.c = c
	w.value = strings.Repeat("x", valueSize)
	host, _ := os.Hostname()
	_, err = cache.GetOrLoad(ctx, c, fmt.Sprintf("warm-%s-%d", host, os.Getpid()), func(context.Context) (string, error) {
		return w.value, nil
	})
	if err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	if near {
		// The near cache answers once its tracking connection is up.
		for deadline := time.Now().Add(10 * time.Second); !c.NearActive(); {
			if time.Now().After(deadline) {
				return errors.New("near cache not active after 10s")
			}
			time.Sleep(10 * time.Millisecond) // NearActive has no signal to wait on
		}
	}
	return nil
}

func (w *worker) closeCache() {
	if w.c != nil {
		_ = w.c.Close()
		w.c = nil
	}
	if w.rdb != nil {
		_ = w.rdb.Close()
		w.rdb = nil
	}
}

// writes makes n writes at rate per second over keys keys, in turn a Set,
// a Delete and a rebuild (GetOrLoad of the key the Delete removed) of
// each key. It returns how many failed and the first failure.
func (w *worker) writes(ctx context.Context, n int, rate float64, keys int) (int, string) {
	errs, first := 0, ""
	start := time.Now()
	for i := range n {
		if d := time.Until(start.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
		key := "k" + strconv.Itoa((i/3)%keys)
		var err error
		switch i % 3 {
		case 0:
			err = cache.Set(ctx, w.c, key, w.value)
		case 1:
			err = w.c.Delete(ctx, key)
		case 2:
			_, err = cache.GetOrLoad(ctx, w.c, key, func(context.Context) (string, error) { return w.value, nil })
		}
		if err != nil {
			if errs++; first == "" {
				first = err.Error()
			}
		}
	}
	return errs, first
}
