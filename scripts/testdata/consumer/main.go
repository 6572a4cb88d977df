// Command consumer is the program of the consumer check
// (scripts/consumer-check.sh): copied into a module outside the repository
// that requires the repository's modules at the version being released, it
// does one real thing with each public package against the server at
// $REDIS_ADDR and exits non-zero if anything fails.
//
// It lives under testdata so that no module of the repository builds it:
// it must be built the way a user's program is, through go get.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/compress"
	"github.com/hotkv/stampede/gocronlock"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
	"github.com/hotkv/stampede/stampedeotel"
	"github.com/hotkv/stampede/stampedeprom"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Getenv("REDIS_ADDR")); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		os.Exit(1)
	}
}

// run checks each package in turn, sharing one client, one Prometheus
// registry and one OpenTelemetry Telemetry between them.
func run(ctx context.Context, addr string) error {
	if addr == "" {
		return errors.New("REDIS_ADDR is not set")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("ping %s: %w", addr, err)
	}
	reg := prometheus.NewRegistry()
	prom, err := stampedeprom.New(reg, nil)
	if err != nil {
		return fmt.Errorf("stampedeprom.New: %w", err)
	}
	tel, err := stampedeotel.New(nil)
	if err != nil {
		return fmt.Errorf("stampedeotel.New: %w", err)
	}
	codec := compress.S2(cache.Msgpack, nil)
	if err := roundTrip(codec); err != nil {
		return err
	}
	c, err := cache.New(rdb, &cache.Options{
		Codec:    codec,
		Observer: stampedeotel.Chain(prom.CacheObserver("consumer"), tel.CacheObserver("consumer")),
	})
	if err != nil {
		return fmt.Errorf("cache.New: %w", err)
	}
	defer c.Close()
	locks, err := lock.New(rdb, &lock.Options{
		Observer: stampedeprom.Chain(prom.LockObserver("consumer"), tel.LockObserver("consumer")),
	})
	if err != nil {
		return fmt.Errorf("lock.New: %w", err)
	}
	for _, check := range []func(context.Context) error{
		func(ctx context.Context) error { return obtainRelease(ctx, locks) },
		func(ctx context.Context) error { return getOrLoad(ctx, c) },
		func(ctx context.Context) error { return throughMiddleware(ctx, c) },
		func(ctx context.Context) error { return cronLock(ctx, locks) },
		func(context.Context) error { return gathered(reg) },
	} {
		if err := check(ctx); err != nil {
			return err
		}
	}
	return nil
}

// roundTrip encodes a value long enough to be compressed and decodes it.
func roundTrip(codec cache.Codec) error {
	in := strings.Repeat("stampede ", 100)
	b, err := codec.Marshal(in)
	if err != nil {
		return fmt.Errorf("compress: marshal: %w", err)
	}
	var out string
	if err := codec.Unmarshal(b, &out); err != nil {
		return fmt.Errorf("compress: unmarshal: %w", err)
	}
	if out != in || len(b) >= len(in) {
		return fmt.Errorf("compress: round trip of %d bytes gave %d bytes, stored in %d", len(in), len(out), len(b))
	}
	fmt.Printf("compress: S2 round trip, %d bytes stored in %d\n", len(in), len(b))
	return nil
}

// obtainRelease obtains a lock, finds a second Obtain refused, and releases it.
func obtainRelease(ctx context.Context, locks *lock.Client) error {
	l, err := locks.Obtain(ctx, "consumer:lock", 10*time.Second, nil)
	if err != nil {
		return fmt.Errorf("lock: obtain: %w", err)
	}
	if _, err := locks.Obtain(ctx, "consumer:lock", 10*time.Second, nil); !errors.Is(err, lock.ErrNotObtained) {
		return fmt.Errorf("lock: second obtain: got %v, want lock.ErrNotObtained", err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("lock: release: %w", err)
	}
	fmt.Println("lock: obtained, refused to a second caller, released")
	return nil
}

// getOrLoad loads a value once and reads it back from the server.
func getOrLoad(ctx context.Context, c *cache.Cache) error {
	var loads atomic.Int32
	load := func(context.Context) (string, error) {
		loads.Add(1)
		return "loaded", nil
	}
	for range 2 {
		v, err := cache.GetOrLoad(ctx, c, "consumer:key", load)
		if err != nil {
			return fmt.Errorf("cache: GetOrLoad: %w", err)
		}
		if v != "loaded" {
			return fmt.Errorf("cache: GetOrLoad returned %q", v)
		}
	}
	if n := loads.Load(); n != 1 {
		return fmt.Errorf("cache: two GetOrLoad calls ran the loader %d times, want 1", n)
	}
	fmt.Println("cache: GetOrLoad loaded once, then served from the server")
	return nil
}

// throughMiddleware sends two requests for one URL through the middleware:
// the handler renders the first, the cache answers the second.
func throughMiddleware(ctx context.Context, c *cache.Cache) error {
	var renders atomic.Int32
	h := middleware.Cache(c, time.Minute)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "render %d", renders.Add(1))
	}))
	var bodies [2][]byte
	for i := range bodies {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://consumer.test/page", nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			return fmt.Errorf("middleware: request %d: status %d", i+1, rec.Code)
		}
		bodies[i] = rec.Body.Bytes()
	}
	if !bytes.Equal(bodies[0], bodies[1]) || renders.Load() != 1 {
		return fmt.Errorf("middleware: bodies %q and %q after %d renders, want one render served twice", bodies[0], bodies[1], renders.Load())
	}
	fmt.Println("middleware: one render, the second request answered from the cache")
	return nil
}

// cronLock takes and gives back the lock of a gocron job.
func cronLock(ctx context.Context, locks *lock.Client) error {
	locker, err := gocronlock.New(locks, &gocronlock.Options{MinHold: time.Second})
	if err != nil {
		return fmt.Errorf("gocronlock.New: %w", err)
	}
	held, err := locker.Lock(ctx, "consumer-job")
	if err != nil {
		return fmt.Errorf("gocronlock: lock: %w", err)
	}
	if err := held.Unlock(ctx); err != nil {
		return fmt.Errorf("gocronlock: unlock: %w", err)
	}
	fmt.Println("gocronlock: job lock taken and given back")
	return nil
}

// gathered gathers the registry and finds the cache's and the lock's events
// counted in stampedeprom's metrics.
func gathered(reg *prometheus.Registry) error {
	families, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("stampedeprom: gather: %w", err)
	}
	var cacheEvents, lockEvents float64
	for _, f := range families {
		var n float64
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
		switch {
		case strings.Contains(f.GetName(), "cache"):
			cacheEvents += n
		case strings.Contains(f.GetName(), "lock"):
			lockEvents += n
		}
	}
	if cacheEvents == 0 || lockEvents == 0 {
		return fmt.Errorf("stampedeprom: gathered %d families counting %v cache and %v lock events, want some of each", len(families), cacheEvents, lockEvents)
	}
	fmt.Printf("stampedeprom: gathered %d families counting %v cache and %v lock events\n", len(families), cacheEvents, lockEvents)
	return nil
}
