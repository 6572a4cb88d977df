package lock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
)

// pipedCounter counts the lock commands a client sends in pipelines of
// more than one: SET (the Obtain), and the releases.
type pipedCounter struct{ piped atomic.Int64 }

func (*pipedCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (*pipedCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (p *pipedCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 1 && cmds[0].Name() != "hello" { // not the probe's pipeline
			for _, c := range cmds {
				switch c.Name() {
				case "set", "delex", "delifeq", "evalsha":
					p.piped.Add(1)
				}
			}
		}
		return next(ctx, cmds)
	}
}

// contendCycles runs cycles Obtain (nil options) + Release cycles from
// each of goroutines goroutines on one Client, over keys keys under prefix
// that the goroutines share, checking that no key ever has two holders at
// once, that every Release of a held lock succeeds, and that every key is
// free at the end. It returns how many Obtains succeeded and were refused.
func contendCycles(t *testing.T, ctx context.Context, c *lock.Client, rc redis.UniversalClient, prefix string, goroutines, keys, cycles int) (obtained, refused int64) {
	t.Helper()
	holders := make([]atomic.Int32, keys)
	var got, lost atomic.Int64
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range cycles {
				k := (g + i) % keys
				key := prefix + ":" + strconv.Itoa(k)
				l, err := c.Obtain(ctx, key, 10*time.Second)
				if err != nil {
					if !errors.Is(err, lock.ErrNotObtained) {
						t.Errorf("Obtain %s: %v", key, err)
						return
					}
					lost.Add(1)
					continue
				}
				got.Add(1)
				if n := holders[k].Add(1); n != 1 {
					t.Errorf("%d holders of %s at once", n, key)
				}
				holders[k].Add(-1)
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release %s: %v", key, err)
					return
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		if n, err := rc.Exists(ctx, prefix+":"+strconv.Itoa(k)).Result(); err != nil || n != 0 {
			t.Errorf("key %d still held after every release: EXISTS = %d, %v", k, n, err)
		}
	}
	return got.Load(), lost.Load()
}

// TestObtain_concurrentCallsPipelined: Obtain (nil options) and Release
// calls made at the same time on one Client go out in shared pipelines,
// and every guarantee stands: at most one holder per key at any moment,
// every Release of a held lock succeeds and frees it, a lock that is held
// is refused to the others. On every server, with each release strategy.
func TestObtain_concurrentCallsPipelined(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		c, rc := newClient(t, s, nil)
		var count pipedCounter
		rc.AddHook(&count)
		const (
			goroutines = 32
			keys       = 8
			cycles     = 40
		)
		obtained, refused := contendCycles(t, ctx, c, rc, redistest.Key(t, "p"), goroutines, keys, cycles)
		if obtained == 0 || refused == 0 {
			t.Errorf("%d obtained, %d refused: want both (goroutines share keys)", obtained, refused)
		}
		if count.piped.Load() == 0 {
			t.Errorf("no lock command went in a pipeline with another, out of %d cycles", goroutines*cycles)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster, redistest.Miniredis)
}

// autoPipelining is what *redis.Client and *redis.ClusterClient offer to
// make an AutoPipeliner.
type autoPipelining interface {
	AutoPipeline() (*redis.AutoPipeliner, error)
}

// TestNew_onAutoPipeliner: a Client made on go-redis's AutoPipeliner,
// which streams the commands of concurrent callers on a connection it
// holds (the Client sends each at once then, without batching of its
// own), probes the same strategies and keeps every guarantee: one holder
// per key among concurrent callers, Release only by the owner (once),
// fences that grow, and a waiter that gets the lock when it is released.
func TestNew_onAutoPipeliner(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		plain, rc := newClient(t, s, nil)
		ap, err := rc.(autoPipelining).AutoPipeline()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ap.Close() }) // before rc closes
		c, err := lock.New(ap, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := plain.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := c.Capabilities(ctx); err != nil || got != want {
			t.Fatalf("Capabilities on the AutoPipeliner: %+v, %v; the plain client's: %+v", got, err, want)
		}

		prefix := redistest.Key(t, "ap")
		if obtained, _ := contendCycles(t, ctx, c, rc, prefix, 16, 4, 30); obtained == 0 {
			t.Fatal("no Obtain succeeded")
		}

		key := prefix + ":owner"
		l1, err := c.Obtain(ctx, key, 10*time.Second, lock.WithFencing())
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *lock.Lock, 1)
		go func() {
			l, err := c.Obtain(ctx, key, 10*time.Second, lock.WithFencing(), lock.WithRetry(lock.LinearBackoff(5*time.Millisecond)))
			if err != nil {
				t.Errorf("waiting Obtain: %v", err)
			}
			got <- l
		}()
		if err := l1.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := l1.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("second Release: %v, want ErrNotHeld", err)
		}
		var l2 *lock.Lock
		select {
		case l2 = <-got:
		case <-ctx.Done():
			t.Fatalf("the waiter did not get the released lock: %v", ctx.Err())
		}
		if l2 == nil {
			return
		}
		if l2.Fence() <= l1.Fence() {
			t.Errorf("fences %d then %d, want them to grow", l1.Fence(), l2.Fence())
		}
		if err := l1.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release by the former owner while another holds it: %v, want ErrNotHeld", err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Errorf("Release by the owner: %v", err)
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster, redistest.Miniredis)
}
