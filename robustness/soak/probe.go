// This file holds probe, the go-redis hook on the cache's client that checks
// every GET of a cached value against the versions of this process's
// completed Deletes (stale sets).

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/codec"
	"github.com/redis/go-redis/v9"
)

// probe is a go-redis hook on the cache's client that turns every GET of a
// cached value into a stale-set check: the version of this process's
// latest completed Delete of the key is read before the GET is sent, so a
// reply holding an older version was written after that Delete by a
// rebuild that read the database before the update the Delete followed.
// It is exact (the server held that value then) and sees every read, not
// only the audits' samples. With the near cache it sees the reads that
// fill it, not the hits it answers (coherence.go checks those).
type probe struct{ w *worker }

func (probe) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessPipelineHook checks the GETs of pipelines too: the near cache's
// fills read a value with its expiry (GET and PTTL) in one.
func (p probe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := time.Now()
		floors := make([]int64, len(cmds))
		ks := make([]int, len(cmds))
		for i, cmd := range cmds {
			ks[i] = p.key(cmd)
			if ks[i] >= 0 {
				floors[i] = p.w.minVer[ks[i]].Load()
			}
		}
		err := next(ctx, cmds)
		for i, cmd := range cmds {
			if ks[i] >= 0 && cmd.Err() == nil {
				p.check(ctx, cmd, ks[i], floors[i], sent)
			}
		}
		return err
	}
}

func (p probe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		k := p.key(cmd)
		if k < 0 {
			return next(ctx, cmd)
		}
		floor, sent := p.w.minVer[k].Load(), time.Now()
		if err := next(ctx, cmd); err != nil {
			return err
		}
		p.check(ctx, cmd, k, floor, sent)
		return nil
	}
}

// key returns the key number of a GET of a cached value, or -1 for any
// other command.
func (p probe) key(cmd redis.Cmder) int {
	args := cmd.Args()
	if len(args) != 2 || cmd.Name() != "get" {
		return -1
	}
	key, _ := args[1].(string)
	n, ok := strings.CutPrefix(key, namespace(p.w.cfg.Prefix)+":{k")
	if !ok || !strings.HasSuffix(n, "}") {
		return -1
	}
	k, err := strconv.Atoi(strings.TrimSuffix(n, "}"))
	if err != nil || k < 0 || k >= len(p.w.minVer) {
		return -1
	}
	return k
}

// check checks what a GET of key k read against floor, the version of
// this process's latest completed Delete of k when the GET was sent, and
// against every worker's Deletes recorded as returned before it was sent
// (at sent; see record): a version one of those superseded was written
// after that Delete, a stale set too.
func (p probe) check(ctx context.Context, cmd redis.Cmder, k int, floor int64, sent time.Time) {
	sc, ok := cmd.(*redis.StringCmd)
	if !ok {
		return
	}
	e, err := codec.Decode([]byte(sc.Val()))
	if err != nil {
		return // a rebuild claim, not a value
	}
	var v string
	if err := cache.Msgpack.Unmarshal(e.Payload, &v); err != nil {
		p.w.wrongValues.Add(1)
		return
	}
	key, ver, _, ok := parseValue(v)
	switch {
	case !ok || key != cacheKey(k):
		p.w.wrongValues.Add(1)
		p.w.sample(fmt.Sprintf("%s: GET of %s read %q", p.w.name(), cacheKey(k), v))
	case ver < floor:
		p.staleSet(v, fmt.Sprintf("%s: the cache held %s after a Delete that followed version %d completed (stale set)", p.w.name(), v, floor))
	default:
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		first, by, err := p.w.superseded(ctx, k, ver, sent)
		if err != nil {
			p.w.countErr("database superseded", err)
		} else if first >= 0 {
			p.staleSet(v, fmt.Sprintf("%s: the cache held %s %v after another worker's Delete that followed version %d returned (stale set)",
				p.w.name(), v, sent.Sub(time.Unix(0, first)).Round(time.Microsecond), by))
		}
	}
}

// staleSet counts the stale value v once, and keeps a sample of it.
func (p probe) staleSet(v, sample string) {
	p.w.mu.Lock()
	seen := p.w.staleSets[v]
	p.w.staleSets[v] = true
	p.w.mu.Unlock()
	if !seen {
		p.w.sampleViolation(false, sample)
	}
}
