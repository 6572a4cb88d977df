// This file holds the fault injection: the two proxies in front of the
// server, the clients that go through them, the schedule of faults, and the
// proxies' counters.

package main

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/redis/go-redis/v9"
)

// openFaulty starts the two fault proxies, one in front of the server for
// the cache and one for the locks, and a client through each. Clients
// behind proxies time out fast, so faults turn into errors (and fail-open
// loads) quickly.
func (w *worker) openFaulty(opts *redis.Options) error {
	var err error
	if w.cacheP, err = faultproxy.Start(opts.Addr); err != nil {
		return err
	}
	if w.lockP, err = faultproxy.Start(opts.Addr); err != nil {
		return err
	}
	faulty := func(addr string) *redis.Client {
		o := *opts
		o.Addr = addr
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout = 250*time.Millisecond, 200*time.Millisecond, 200*time.Millisecond
		o.PoolSize, o.PoolTimeout, o.MaxRetries = 32, 300*time.Millisecond, 1
		o.ContextTimeoutEnabled = true
		return redis.NewClient(&o)
	}
	w.cacheC, w.lockC = faulty(w.cacheP.Addr()), faulty(w.lockP.Addr())
	return nil
}

// faultSchedule injects a random fault every 0.3 to 2 s on one or both
// proxies, until ctx ends.
func (w *worker) faultSchedule(ctx context.Context, r *rand.Rand) {
	for pause(ctx, time.Duration(300+r.IntN(1700))*time.Millisecond) {
		var ps []*faultproxy.Proxy
		switch r.IntN(3) {
		case 0:
			ps = []*faultproxy.Proxy{w.cacheP}
		case 1:
			ps = []*faultproxy.Proxy{w.lockP}
		default:
			ps = []*faultproxy.Proxy{w.cacheP, w.lockP}
		}
		var kind string
		switch r.IntN(5) {
		case 0:
			kind = "latency spikes"
			d := time.Duration(50+r.IntN(250)) * time.Millisecond
			for _, p := range ps {
				p.SetSpikes(0.05, d)
			}
			pause(ctx, time.Duration(500+r.IntN(2000))*time.Millisecond)
		case 1:
			kind = "latency"
			d := time.Duration(5+r.IntN(100)) * time.Millisecond
			for _, p := range ps {
				p.SetLatency(d)
			}
			pause(ctx, time.Duration(500+r.IntN(1500))*time.Millisecond)
		case 2:
			kind = "reset"
			for _, p := range ps {
				p.Reset()
			}
		case 3:
			kind = "drop"
			for _, p := range ps {
				p.Drop()
			}
		case 4:
			kind = "black hole"
			for _, p := range ps {
				p.BlackHole()
			}
			pause(ctx, time.Duration(100+r.IntN(900))*time.Millisecond)
		}
		for _, p := range ps {
			p.Resume()
		}
		w.mu.Lock()
		w.faults[kind]++
		w.mu.Unlock()
	}
}

// proxyStats adds up the counters of both proxies.
func (w *worker) proxyStats() faultproxy.Stats {
	a, b := w.cacheP.Stats(), w.lockP.Stats()
	return faultproxy.Stats{Accepted: a.Accepted + b.Accepted, Refused: a.Refused + b.Refused, Dropped: a.Dropped + b.Dropped,
		Reset: a.Reset + b.Reset, Spikes: a.Spikes + b.Spikes, Chunks: a.Chunks + b.Chunks}
}
