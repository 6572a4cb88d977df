package scenarios

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"

	"github.com/hotkv/stampede/lock"
)

// lockCycler is one way a pod takes and frees a lock on key.
type lockCycler func(ctx context.Context, key string) error

// errNotFreed is a raw cycle whose compare-and-delete found the key not
// holding its token: it must not happen, each goroutine has its own key.
var errNotFreed = errors.New("the compare-and-delete deleted nothing")

// autopipelineSuffix marks a lock-gap approach whose commands go through
// go-redis's automatic pipeliner (Client.AutoPipeline) rather than the
// plain client: "raw+autopipeline", "stampede+autopipeline".
const autopipelineSuffix = "+autopipeline"

// rueidislockApproach is rueidislock's TryWithContext and the release
// its cancel function waits for, with one key per lock (KeyMajority 1,
// where its default takes 2 of 3): the peer that pipelines concurrent
// calls on one connection. Its client-side cache is off (it serves only
// the waiting of WithContext, and not every server tracks keys), and an
// attempt may take up to go-redis's default read timeout, 3 s, as the
// others' may (its own default, 20 ms, fails attempts on a busy machine).
const rueidislockApproach = "rueidislock"

// newRueidislockCycler is the rueidislock approach on the server c talks
// to.
func newRueidislockCycler(c *redis.Client) (lockCycler, func(), error) {
	o := c.Options()
	locker, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption: rueidis.ClientOption{InitAddress: []string{o.Addr}, Username: o.Username, Password: o.Password,
			SelectDB: o.DB, DisableCache: true},
		KeyMajority: 1, TryNextAfter: 3 * time.Second,
	})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, key string) error {
		_, release, err := locker.TryWithContext(ctx, key)
		if err != nil {
			return err
		}
		release()
		return nil
	}, locker.Close, nil
}

// newLockCycler returns the cycle of approach a on rdb: "stampede",
// lock.Client's Obtain with nil options and Release; "raw", the commands
// they send: SET NX PX with a fresh random token, then the release
// command the lock client found the server to offer.
func newLockCycler(ctx context.Context, c *redis.Client, a string) (cycle lockCycler, closeFn func(), err error) {
	if a == rueidislockApproach {
		return newRueidislockCycler(c)
	}
	var rdb lock.RedisClient = c
	if base, ok := strings.CutSuffix(a, autopipelineSuffix); ok {
		ap, err := c.AutoPipeline()
		if err != nil {
			return nil, nil, err
		}
		rdb, a = ap, base
	}
	lc, err := lock.New(rdb, nil)
	if err != nil {
		return nil, nil, err
	}
	switch a {
	case "stampede":
		return func(ctx context.Context, key string) error {
			l, err := lc.Obtain(ctx, key, 10*time.Second)
			if err != nil {
				return err
			}
			return l.Release(ctx)
		}, func() {}, nil
	case "raw":
		caps, err := lc.Capabilities(ctx)
		if err != nil {
			return nil, nil, err
		}
		script := redis.NewScript(compareDeleteSrc)
		release := func(ctx context.Context, key, tok string) (int64, error) {
			switch {
			case caps.Release == lock.ReleaseDelex:
				return rdb.Do(ctx, "DELEX", key, "IFEQ", tok).Int64()
			case caps.DelIfEq:
				return rdb.Do(ctx, "DELIFEQ", key, tok).Int64()
			}
			return script.Run(ctx, rdb, []string{key}, tok, "").Int64()
		}
		return func(ctx context.Context, key string) error {
			var b [16]byte
			_, _ = rand.Read(b[:])
			tok := hex.EncodeToString(b[:])
			ok, err := rdb.SetNX(ctx, key, tok, 10*time.Second).Result()
			switch {
			case err != nil:
				return err
			case !ok:
				return lock.ErrNotObtained
			}
			n, err := release(ctx, key, tok)
			if err == nil && n != 1 {
				err = errNotFreed
			}
			return err
		}, func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown lock approach %q", a)
}

// runLockJob runs lock cycles on keys of its own from j.Goroutines
// goroutines for j.Duration.
func runLockJob(rdb *redis.Client, j job, in *bufio.Scanner, say func(string, ...any)) (*podResult, error) {
	ctx := context.Background()
	cycle, closeCycler, err := newLockCycler(ctx, rdb, j.Approach)
	if err != nil {
		return nil, err
	}
	defer closeCycler()
	// First use probes the server or loads a script: pay it before.
	if err := cycle(ctx, j.NS+":warm:"+strconv.Itoa(j.Pod)); err != nil {
		return nil, fmt.Errorf("warm up: %w", err)
	}
	start, err := awaitGo(in, say)
	if err != nil {
		return nil, err
	}
	end := start.Add(j.Duration)
	time.Sleep(time.Until(start))
	var (
		mu  sync.Mutex // guards res
		res = &podResult{}
		wg  sync.WaitGroup
	)
	for g := range j.Goroutines {
		wg.Go(func() {
			var mine podResult
			key := j.NS + ":" + strconv.Itoa(j.Pod) + ":" + strconv.Itoa(g)
			for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
				err := cycle(ctx, key)
				mine.record(0, time.Since(t0), err, false)
			}
			mu.Lock()
			res.merge(&mine)
			mu.Unlock()
		})
	}
	wg.Wait()
	return res, nil
}
