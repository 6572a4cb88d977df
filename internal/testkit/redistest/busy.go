package redistest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Busy makes the server at addr answer BUSY to every command but a few
// (HELLO, SCRIPT KILL, ...), as it does while a long script runs: it runs
// a script that loops on a connection of its own, with busy-reply-threshold
// lowered so that the server answers BUSY after 10 ms of it. It returns
// once a PING was answered BUSY; the returned stop kills the script, waits
// until the server answers again and restores the threshold. stop is also
// called in tb.Cleanup; calling it twice is harmless.
func Busy(tb testing.TB, addr string) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	admin := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1})
	old, err := admin.ConfigGet(ctx, "busy-reply-threshold").Result()
	if err != nil {
		cancel()
		_ = admin.Close()
		tb.Fatalf("redistest: CONFIG GET busy-reply-threshold: %v", err)
	}
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "10").Err(); err != nil {
		cancel()
		_ = admin.Close()
		tb.Fatalf("redistest: CONFIG SET busy-reply-threshold: %v", err)
	}
	looper := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: -1, MaxRetries: -1})
	done := make(chan error, 1)
	go func() { done <- looper.Eval(ctx, "while true do end", nil).Err() }()
	for {
		err := admin.Ping(ctx).Err()
		if err != nil && strings.HasPrefix(err.Error(), "BUSY") {
			break
		}
		if ctx.Err() != nil {
			cancel()
			tb.Fatalf("redistest: the server at %s never answered BUSY (last: %v)", addr, err)
		}
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		for {
			err := admin.Do(ctx, "SCRIPT", "KILL").Err()
			if err == nil || strings.HasPrefix(err.Error(), "NOTBUSY") || ctx.Err() != nil {
				break
			}
		}
		<-done
		if v := old["busy-reply-threshold"]; v != "" {
			_ = admin.ConfigSet(ctx, "busy-reply-threshold", v).Err()
		}
		cancel()
		_ = looper.Close()
		_ = admin.Close()
	}
	tb.Cleanup(stop)
	return stop
}
