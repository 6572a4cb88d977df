package lock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// cmdCounter counts the commands a client sends, to report round trips per
// operation (a pipeline counts once per command in it).
type cmdCounter struct{ n atomic.Int64 }

func (c *cmdCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *cmdCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *cmdCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// BenchmarkObtainRelease measures Obtain+Release cycles with each release
// strategy a server offers, next to a baseline written by hand with
// go-redis in the same run: SET NX PX with a 128-bit random token, then the
// server's best compare-and-delete (DELEX IFEQ, DELIFEQ or an EVALSHA).
// Compare ns/op of a strategy with the baseline's; cmds/op must be 2.
func BenchmarkObtainRelease(b *testing.B) {
	for _, kind := range []redistest.Kind{redistest.Redis8, redistest.Valkey, redistest.Redis7} {
		b.Run(string(kind), func(b *testing.B) {
			s := redistest.Shared(b, kind)
			probe, _ := newClient(b, s, nil)
			probed, err := probe.Capabilities(context.Background())
			if err != nil {
				b.Fatal(err)
			}
			b.Run("baseline", func(b *testing.B) { benchBaseline(b, s, probed.Release) })
			for _, caps := range strategies(probed) {
				if caps.Extend != probed.Extend || caps.Digest != probed.Digest {
					continue // only the release strategy matters here
				}
				b.Run(caps.Release.String(), func(b *testing.B) {
					var cnt cmdCounter
					rc := s.Client(b)
					rc.AddHook(&cnt)
					c, err := lock.New(&redisx.Forced{Client: rc, Caps: redisx.Mirror[redisx.Capabilities](caps)}, nil)
					if err != nil {
						b.Fatal(err)
					}
					ctx := context.Background()
					key := redistest.Key(b, "bench")
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						l, err := c.Obtain(ctx, key, time.Second)
						if err != nil {
							b.Fatal(err)
						}
						if err := l.Release(ctx); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(cnt.n.Load())/float64(b.N), "cmds/op")
				})
			}
		})
	}
}

func benchBaseline(b *testing.B, s *redistest.Server, release lock.ReleaseStrategy) {
	var cnt cmdCounter
	rc := s.Client(b)
	rc.AddHook(&cnt)
	script := redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)
	ctx := context.Background()
	key := redistest.Key(b, "baseline")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var raw [16]byte
		_, _ = rand.Read(raw[:])
		tok := hex.EncodeToString(raw[:])
		ok, err := rc.SetNX(ctx, key, tok, time.Second).Result()
		if err != nil || !ok {
			b.Fatal("SET NX:", ok, err)
		}
		var n int64
		switch release {
		case lock.ReleaseDelex:
			n, err = rc.Do(ctx, "DELEX", key, "IFEQ", tok).Int64()
		case lock.ReleaseDelIfEq:
			n, err = rc.Do(ctx, "DELIFEQ", key, tok).Int64()
		default:
			n, err = script.Run(ctx, rc, []string{key}, tok).Int64()
		}
		if err != nil || n != 1 {
			b.Fatal("release:", n, err)
		}
	}
	b.ReportMetric(float64(cnt.n.Load())/float64(b.N), "cmds/op")
}

// BenchmarkRelease_noWaiters measures what the hand-off costs a release
// that finds nobody waiting: Obtain+Release cycles of a lock obtained
// without a Retry (released by the server's best compare-and-delete, as
// before hand-off) and with one (released by the hand-off script, which
// also checks the queue). Compare their ns/op; both send 2 commands.
func BenchmarkRelease_noWaiters(b *testing.B) {
	for _, kind := range []redistest.Kind{redistest.Redis8, redistest.Valkey, redistest.Redis7} {
		b.Run(string(kind), func(b *testing.B) {
			s := redistest.Shared(b, kind)
			for _, v := range []struct {
				name string
				opts lock.ObtainOption // nil: skipped
			}{
				{"plain", nil},
				{"handoff", lock.WithRetry(lock.LinearBackoff(time.Millisecond))},
			} {
				b.Run(v.name, func(b *testing.B) {
					var cnt cmdCounter
					c, rc := newClient(b, s, nil)
					rc.AddHook(&cnt)
					ctx := context.Background()
					key := redistest.Key(b, "bench")
					warm, err := c.Obtain(ctx, key, time.Second, v.opts) // probe and script load behind us
					if err != nil {
						b.Fatal(err)
					}
					if err := warm.Release(ctx); err != nil {
						b.Fatal(err)
					}
					cnt.n.Store(0)
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						l, err := c.Obtain(ctx, key, time.Second, v.opts)
						if err != nil {
							b.Fatal(err)
						}
						if err := l.Release(ctx); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(cnt.n.Load())/float64(b.N), "cmds/op")
				})
			}
		})
	}
}

// BenchmarkRelease_noWaitersInterleaved times Release alone, with nobody
// waiting, alternating a lock obtained without a Retry (plain release) and
// one obtained with a Retry (hand-off script) so that both see the same
// load on a shared machine; it reports the median of each in µs.
func BenchmarkRelease_noWaitersInterleaved(b *testing.B) {
	for _, kind := range []redistest.Kind{redistest.Redis8, redistest.Valkey, redistest.Redis7} {
		b.Run(string(kind), func(b *testing.B) {
			s := redistest.Shared(b, kind)
			c, _ := newClient(b, s, nil)
			ctx := context.Background()
			key := redistest.Key(b, "bench")
			retry := lock.WithRetry(lock.LinearBackoff(time.Millisecond))
			var plain, handoff []time.Duration
			b.ResetTimer()
			for i := range 2*b.N + 2 {
				var opts lock.ObtainOption // nil: skipped
				if i%2 == 1 {
					opts = retry
				}
				l, err := c.Obtain(ctx, key, time.Second, opts)
				if err != nil {
					b.Fatal(err)
				}
				t := time.Now()
				if err := l.Release(ctx); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t)
				if i < 2 {
					continue // probe and script load
				}
				if opts == nil {
					plain = append(plain, d)
				} else {
					handoff = append(handoff, d)
				}
			}
			slices.Sort(plain)
			slices.Sort(handoff)
			b.ReportMetric(float64(plain[len(plain)/2].Nanoseconds())/1e3, "plain-µs")
			b.ReportMetric(float64(handoff[len(handoff)/2].Nanoseconds())/1e3, "handoff-µs")
		})
	}
}
