package scenarios

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
	"github.com/zeebo/xxh3"
)

//go:embed compare_delete.lua
var compareDeleteSrc string

func largeSizes() []int { return []int{1 << 10, 64 << 10, 1 << 20} }

// cad is one way to delete a key only if it holds a value.
type cad struct {
	name   string
	offers func(lock.Capabilities) bool
	lacks  string
	// del deletes key if it holds v and returns the reply (1 deleted).
	del func(ctx context.Context, rc *redis.Client, key, v string) (int64, error)
}

// xxh3Hex is the digest DELEX IFDEQ compares: XXH3-64, seed 0, 16 lower
// case hex characters, zero padded.
func xxh3Hex(v string) string { return fmt.Sprintf("%016x", xxh3.HashString(v)) }

func sha1Hex(v string) string {
	sum := sha1.Sum([]byte(v))
	return hex.EncodeToString(sum[:])
}

func cads(script *redis.Script) []cad {
	return []cad{
		{"DELEX IFEQ (full value)", func(c lock.Capabilities) bool { return c.Release == lock.ReleaseDelex },
			"the server has no DELEX IFEQ",
			func(ctx context.Context, rc *redis.Client, key, v string) (int64, error) {
				return rc.Do(ctx, "DELEX", key, "IFEQ", v).Int64()
			}},
		{"DELIFEQ (full value)", func(c lock.Capabilities) bool { return c.DelIfEq }, "the server has no DELIFEQ",
			func(ctx context.Context, rc *redis.Client, key, v string) (int64, error) {
				return rc.Do(ctx, "DELIFEQ", key, v).Int64()
			}},
		{"Lua compare (full value)", func(lock.Capabilities) bool { return true }, "",
			func(ctx context.Context, rc *redis.Client, key, v string) (int64, error) {
				return script.Run(ctx, rc, []string{key}, v, "").Int64()
			}},
		{"DELEX IFDEQ (XXH3 digest)", func(c lock.Capabilities) bool { return c.Digest == lock.DigestNative },
			"the server has no DELEX IFDEQ",
			func(ctx context.Context, rc *redis.Client, key, v string) (int64, error) {
				return rc.Do(ctx, "DELEX", key, "IFDEQ", xxh3Hex(v)).Int64()
			}},
		{"Lua compare (SHA-1 digest)", func(lock.Capabilities) bool { return true }, "",
			func(ctx context.Context, rc *redis.Client, key, v string) (int64, error) {
				return script.Run(ctx, rc, []string{key}, sha1Hex(v), "sha1").Int64()
			}},
	}
}

// countingConn counts the bytes written to the server.
type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// Large measures compare-and-delete of 1 KiB, 64 KiB and 1 MiB values: by
// the full value (DELEX IFEQ, DELIFEQ, a Lua compare) and by a digest (DELEX IFDEQ
// with XXH3, a Lua compare of SHA-1s), where the server has them. Bytes
// sent are counted on the connection (one connection, so nothing else is
// counted); the time includes hashing on the client.
func Large(ctx context.Context, e *Env, r *report.Results) error {
	var sent atomic.Int64
	o := *e.RDB.Options()
	o.PoolSize, o.MinIdleConns, o.MaxIdleConns = 1, 0, 1
	dial := o.Dialer
	o.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &sent}, nil
	}
	rc := redis.NewClient(&o)
	defer rc.Close()
	if err := rc.Ping(ctx).Err(); err != nil {
		return err
	}
	script := redis.NewScript(compareDeleteSrc)
	if err := script.Load(ctx, rc).Err(); err != nil {
		return fmt.Errorf("load the compare-and-delete script: %w", err)
	}
	methods := cads(script)
	for _, m := range methods {
		if !m.offers(e.Caps) {
			r.Notes = append(r.Notes, fmt.Sprintf("large values: %s skipped: %s.", m.name, m.lacks))
		}
	}
	if got, want := redisx.Digest("Hello world"), xxh3Hex("Hello world"); got != want {
		r.Notes = append(r.Notes, fmt.Sprintf("large values: redisx.Digest(%q) = %s, want %s.", "Hello world", got, want))
	}
	key := e.key("large")
	for si, size := range largeSizes() {
		e.Progress.Step("large values · "+sizeName(size), 0)
		b := make([]byte, size)
		_, _ = rand.Read(b)
		v := string(b)
		iters := max(3, e.Cfg.LargeIters/[]int{1, 2, 10}[si])
		for _, m := range methods {
			row := report.Large{Size: size, Method: m.name}
			if !m.offers(e.Caps) {
				row.Skipped = m.lacks
				r.Large = append(r.Large, row)
				continue
			}
			var lat []int64
			var bytes int64
			for range iters {
				if err := rc.Set(ctx, key, v, time.Minute).Err(); err != nil {
					return fmt.Errorf("store a %d-byte value: %w", size, err)
				}
				before := sent.Load()
				t0 := time.Now()
				n, err := m.del(ctx, rc, key, v)
				lat = append(lat, time.Since(t0).Microseconds())
				bytes += sent.Load() - before
				if err == nil && n != 1 {
					err = fmt.Errorf("replied %d: the value was not recognised", n)
				}
				if err != nil {
					row.Errors++
					if row.FirstError == "" {
						row.FirstError = err.Error()
					}
				}
			}
			row.Iterations = iters
			row.BytesSent = float64(bytes) / float64(iters)
			row.Latency = summarize(lat)
			r.Large = append(r.Large, row)
		}
	}
	return rc.Del(ctx, key).Err()
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return strconv.Itoa(n>>20) + " MiB"
	case n >= 1<<10:
		return strconv.Itoa(n>>10) + " KiB"
	}
	return strconv.Itoa(n) + " B"
}
