package cache_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/redis/go-redis/v9"
)

// Helpers shared by the package's tests. The tests run in one process
// with several Cache instances standing for several processes (the
// process_ tests use real ones). Everything runs on real servers; faults
// and sequencing come from hooks on the real client (recorder), a settable
// clock (Options.Now) and channels, never from sleeping.

// clock is a settable Options.Now, safe for concurrent use. It starts at
// the real time and only moves when told to.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Now()} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// recorder is a go-redis hook that records the arguments of every command
// its client sends (pipelined ones included; subscriptions do not go
// through hooks) and runs optional functions before and after each one.
type recorder struct {
	mu     sync.Mutex
	cmds   [][]string
	before func(args []string) // may block to hold the command back
	after  func(args []string, err error)
}

func record(rc redis.UniversalClient) *recorder {
	r := &recorder{}
	rc.AddHook(r)
	return r
}

// recordedCache returns a Cache on a client of s whose commands rec
// records.
func recordedCache(t *testing.T, s *redistest.Server, opts *cache.Options) (c *cache.Cache, rec *recorder) {
	t.Helper()
	rc := s.Client(t)
	rec = record(rc)
	return newCacheOn(t, rc, opts), rec
}

func (r *recorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *recorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := r.sent(cmd)
		err := next(ctx, cmd)
		r.done(args, cmd.Err())
		return err
	}
}

func (r *recorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		all := make([][]string, len(cmds))
		for i, cmd := range cmds {
			all[i] = r.sent(cmd)
		}
		err := next(ctx, cmds)
		for i, cmd := range cmds {
			r.done(all[i], cmd.Err())
		}
		return err
	}
}

func (r *recorder) sent(cmd redis.Cmder) []string {
	raw := cmd.Args()
	args := make([]string, len(raw))
	for i, a := range raw {
		switch a := a.(type) {
		case string:
			args[i] = a
		case []byte:
			args[i] = string(a)
		default:
			args[i] = fmt.Sprint(a)
		}
	}
	if len(args) > 0 {
		args[0] = strings.ToLower(args[0])
	}
	if len(args) == 0 || handshake(args[0]) {
		return args
	}
	r.mu.Lock()
	r.cmds = append(r.cmds, args)
	fn := r.before
	r.mu.Unlock()
	if fn != nil {
		fn(args)
	}
	return args
}

// handshake reports whether name is what go-redis sends on every new
// connection (the subscription's reconnects included): not the cache's
// traffic.
func handshake(name string) bool {
	switch name {
	case "hello", "client", "auth", "select":
		return true
	}
	return false
}

func (r *recorder) done(args []string, err error) {
	if len(args) == 0 || handshake(args[0]) {
		return
	}
	r.mu.Lock()
	fn := r.after
	r.mu.Unlock()
	if fn != nil {
		fn(args, err)
	}
}

// onBefore and onAfter set the functions run around each command.
func (r *recorder) onBefore(fn func(args []string)) {
	r.mu.Lock()
	r.before = fn
	r.mu.Unlock()
}

func (r *recorder) onAfter(fn func(args []string, err error)) {
	r.mu.Lock()
	r.after = fn
	r.mu.Unlock()
}

// reset returns the commands recorded so far and forgets them.
func (r *recorder) reset() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.cmds
	r.cmds = nil
	return out
}

// signalOn returns a channel that receives once per command whose name is
// name and whose first argument (the key) is key, after it completed.
func (r *recorder) signalOn(name, key string) <-chan struct{} {
	ch := make(chan struct{}, 64)
	r.onAfter(func(args []string, _ error) {
		if len(args) > 1 && args[0] == name && args[1] == key {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	})
	return ch
}

// gate returns a channel that loaders block on and a function that opens
// it. The gate is also opened at cleanup (before the caches are closed), so
// a failed test leaves no loader blocked.
func gate(tb testing.TB) (<-chan struct{}, func()) {
	tb.Helper()
	ch := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(ch) }) }
	tb.Cleanup(open)
	return ch, open
}

type result[V any] struct {
	v   V
	err error
}

// goGetOrLoad runs GetOrLoad in a goroutine and delivers its result.
func goGetOrLoad[V any](ctx context.Context, c *cache.Cache, key string, load loader.Func[V]) <-chan result[V] {
	ch := make(chan result[V], 1)
	go func() {
		v, err := cache.GetOrLoad(ctx, c, key, load)
		ch <- result[V]{v, err}
	}()
	return ch
}

// valueKey is where a Cache in namespace ns stores a short printable key.
func valueKey(ns, key string) string { return ns + ":{" + key + "}" }

func randomString(tb testing.TB, n int) string {
	tb.Helper()
	b := make([]byte, (n+1)/2)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)[:n]
}

// heldLoader closes started when it begins, then returns v once release
// is closed, or gives up when its context ends.
func heldLoader(started chan<- struct{}, release <-chan struct{}, v string) loader.Func[string] {
	return func(ctx context.Context) (string, error) {
		close(started)
		select {
		case <-release:
			return v, nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

// releasedLoader returns v once release is closed, or gives up when its
// context ends.
func releasedLoader[V any](release <-chan struct{}, v V) loader.Func[V] {
	return func(ctx context.Context) (V, error) {
		select {
		case <-release:
			return v, nil
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		}
	}
}

// neverLoad is a loader for callers that must be served without loading.
func neverLoad[V any](calls *atomic.Int32) loader.Func[V] {
	return func(context.Context) (V, error) {
		calls.Add(1)
		var zero V
		return zero, errors.New("this loader must not run")
	}
}

// deadClient returns a client for an address nothing listens on, with a
// recorder that sees every command it would send. Bad input must be
// refused before any server call, so a test of it needs no server.
func deadClient(tb testing.TB) (redis.UniversalClient, *recorder) {
	tb.Helper()
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
	tb.Cleanup(func() { _ = rc.Close() })
	return rc, record(rc)
}
