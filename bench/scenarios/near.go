package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/cache"
)

// nearApproach is stampede with the near cache (cache.Options.Near): the
// cold stampede and the hot key run it next to the other approaches when
// the server tracks keys for clients (CLIENT TRACKING).
const nearApproach = "stampede-near"

// nearWait bounds how long a process waits for its near cache to start
// answering (tracking connected, first ping answered).
const nearWait = 5 * time.Second

// awaitNear waits until c's near cache answers, or fails after limit.
// The cache offers no signal for this, so it polls.
func awaitNear(c *cache.Cache, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for !c.NearActive() {
		if time.Now().After(deadline) {
			return fmt.Errorf("near cache not active after %v (does the server support CLIENT TRACKING?)", limit)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return nil
}

// NearWorks reports whether the server keeps a near cache coherent
// (CLIENT TRACKING): the first call finds out, with a cache of its own,
// waiting up to 3 s; the embedded miniredis has no tracking and is not
// asked. Later calls return the same answer.
func (e *Env) NearWorks(ctx context.Context) bool {
	if e.nearChecked {
		return e.nearOK
	}
	e.nearChecked = true
	if e.Embedded {
		return false
	}
	c, err := cache.New(e.RDB, &cache.Options{Namespace: e.key("near-probe"), Near: &cache.Near{MaxEntries: 10}})
	if err != nil {
		return false
	}
	defer c.Close()
	e.nearOK = ctx.Err() == nil && awaitNear(c, 3*time.Second) == nil
	return e.nearOK
}

// noNear is the note a run without a near cache gets.
const noNear = "near cache: the server does not track keys for clients (CLIENT TRACKING; miniredis has none), " +
	"so the near-cache rows and scenarios were skipped"

// noteNoNear adds noNear to the notes, once.
func (e *Env) noteNoNear(notes *[]string) {
	for _, n := range *notes {
		if n == noNear {
			return
		}
	}
	*notes = append(*notes, noNear)
}

// cacheApproaches returns the approaches of the cold stampede and the hot
// key: Approaches, and stampede with the near cache where the server
// allows it.
func cacheApproaches(ctx context.Context, e *Env, notes *[]string) []string {
	if e.NearWorks(ctx) {
		return append(Approaches(), nearApproach)
	}
	e.noteNoNear(notes)
	return Approaches()
}

// runNearJob runs the pod's side of the near-cache scenarios that need
// more than a getter: coherence and memory.
func runNearJob(rdb *redis.Client, j job, in *bufio.Scanner, say func(string, ...any)) (*podResult, error) {
	switch j.Kind {
	case "coh-writer":
		c, err := cache.New(rdb, &cache.Options{Namespace: j.NS, Expiry: cache.ExpiryPolicy{Fresh: time.Hour, Stale: time.Hour},
			WaitTimeout: 5 * time.Second, LoadTimeout: 5 * time.Second})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		acks := func(ctx context.Context, want string) error {
			got, err := rdb.BLPop(ctx, 5*time.Second, j.List).Result()
			switch {
			case err != nil:
				return fmt.Errorf("wait for the reader (%s): %w", want, err)
			case got[1] != want:
				return fmt.Errorf("the reader saw %s, want %s", got[1], want)
			}
			return nil
		}
		start, err := awaitGo(in, say)
		if err != nil {
			return nil, err
		}
		return runCohWriter(c, acks, j, start)
	case "coh-reader":
		var near atomic.Bool
		c, err := cache.New(rdb, &cache.Options{Namespace: j.NS, Near: &cache.Near{MaxEntries: 1000},
			Observer: func(e cache.Event) {
				switch e.Kind {
				case cache.EventHit, cache.EventStale, cache.EventMiss:
					near.Store(e.Near)
				}
			}})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		if err := awaitNear(c, nearWait); err != nil {
			return nil, err
		}
		ack := func(ctx context.Context, state string) error { return rdb.RPush(ctx, j.List, state).Err() }
		start, err := awaitGo(in, say)
		if err != nil {
			return nil, err
		}
		res, err := runCohReader(c, &near, ack, j, start)
		if res != nil {
			res.NearHits = int64(c.Stats().NearHits)
		}
		return res, err
	case "near-memory":
		start, err := awaitGo(in, say)
		if err != nil {
			return nil, err
		}
		return runNearMemory(rdb, j, start)
	}
	return nil, fmt.Errorf("unknown job kind %q", j.Kind)
}
