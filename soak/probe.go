// This file holds probe, the go-redis hook on the cache's client that checks
// every GET of a cached value against the versions of this process's
// completed Deletes (stale sets).

package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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
// only the audits' samples.
type probe struct{ w *worker }

func (probe) DialHook(next redis.DialHook) redis.DialHook { return next }

func (probe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (p probe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	valuePrefix := namespace(p.w.cfg.Prefix) + ":{k"
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) != 2 || cmd.Name() != "get" {
			return next(ctx, cmd)
		}
		key, _ := args[1].(string)
		n, ok := strings.CutPrefix(key, valuePrefix)
		if !ok || !strings.HasSuffix(n, "}") {
			return next(ctx, cmd)
		}
		k, err := strconv.Atoi(strings.TrimSuffix(n, "}"))
		if err != nil || k < 0 || k >= len(p.w.minVer) {
			return next(ctx, cmd)
		}
		floor := p.w.minVer[k].Load()
		if err := next(ctx, cmd); err != nil {
			return err
		}
		sc, ok := cmd.(*redis.StringCmd)
		if !ok {
			return nil
		}
		e, err := codec.Decode([]byte(sc.Val()))
		if err != nil {
			return nil // a rebuild claim, not a value
		}
		var v string
		if err := cache.Msgpack.Unmarshal(e.Payload, &v); err != nil {
			p.w.wrongValues.Add(1)
			return nil
		}
		key, ver, _, ok := parseValue(v)
		switch {
		case !ok || key != cacheKey(k):
			p.w.wrongValues.Add(1)
			p.w.sample(fmt.Sprintf("%s: GET of %s read %q", p.w.name(), cacheKey(k), v))
		case ver < floor:
			p.w.mu.Lock()
			seen := p.w.staleSets[v]
			p.w.staleSets[v] = true
			p.w.mu.Unlock()
			if !seen {
				p.w.sample(fmt.Sprintf("%s: the cache held %s after a Delete that followed version %d completed (stale set)", p.w.name(), v, floor))
			}
		}
		return nil
	}
}
