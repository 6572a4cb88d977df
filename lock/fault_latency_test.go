package lock_test

// Keep-alives on a slow path: every call of the holder crosses a fault
// proxy whose round trip is longer than the refresh interval (ttl/3), as a
// holder far from its server or behind a congested link sees it. The lock
// must stay held: a refresh is due one interval after the previous one was
// sent, so a round trip longer than the interval makes refreshes follow
// each other at once, and each answer still comes well before the lock
// would expire.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

const (
	// slowTTL is the lock TTL of the first attempt; a loss excused by a
	// stall doubles it.
	slowTTL = 600 * time.Millisecond
	// slowRefreshes is how many keep-alive refreshes the work waits for
	// while it holds the lock: several refresh periods.
	slowRefreshes = 5
)

// slowRTT is the proxy's round trip for a lock of ttl: 35% of it, above
// the refresh interval (ttl/3). Two round trips in a row fit before the
// keep-alive's cutoff (ttl less a margin of min(ttl/10, 100ms)), which is
// what a keep-alive that times refreshes from their sends needs. One that
// times them from the answers (the bug) sends the first refresh a round
// trip after the interval and cannot have its answer by the cutoff.
func slowRTT(ttl time.Duration) time.Duration { return ttl * 35 / 100 }

// slowSlack is how much later than the proxy's latency two round trips in
// a row may be answered before the keep-alive's cutoff passes.
func slowSlack(ttl time.Duration) time.Duration {
	return ttl - min(ttl/10, 100*time.Millisecond) - 2*slowRTT(ttl)
}

// slowHolder is a lock client whose every call crosses fault proxies in
// front of a server (on a cluster, one per node), and a direct one that
// looks at the key as the server sees it.
type slowHolder struct {
	c, direct *lock.Client
	faults    faultproxy.Faults
	refreshed chan struct{} // one per keep-alive refresh (Observer); dropped when full
}

func newSlowHolder(tb testing.TB, s *redistest.Server) *slowHolder {
	tb.Helper()
	// No retries: a command the client sent twice would take two round
	// trips and hide what the keep-alive did.
	rc, set := proxiedClient(tb, s, &redis.Options{MaxRetries: -1, DisableIdentity: true})
	h := &slowHolder{faults: set.All(), refreshed: make(chan struct{}, 64)}
	var err error
	h.c, err = lock.New(rc, &lock.Options{Observer: func(e lock.Event) {
		if e.Kind == lock.EventRefreshed && e.Context == context.Background() { // the keep-alive's
			select {
			case h.refreshed <- struct{}{}:
			default:
			}
		}
	}})
	if err != nil {
		tb.Fatal(err)
	}
	h.direct, _ = newClient(tb, s, nil)

	// Before any latency, as a long-running process would have long ago:
	// probe the server, load the scripts a refresh may need (a first
	// EVALSHA that finds no script costs a second round trip) and leave
	// a connection to every node in the pool (a call that dials one
	// through the proxy waits a round trip more for the handshake).
	ctx, cancel := context.WithTimeout(tb.Context(), 10*time.Second)
	defer cancel()
	if cc, ok := rc.(*redis.ClusterClient); ok {
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
			tb.Fatal(err)
		}
	}
	key := redistest.Key(tb, "warm")
	l, err := h.c.Obtain(ctx, key, time.Minute)
	if err == nil {
		err = l.Refresh(ctx, time.Minute)
	}
	if err == nil {
		err = l.Release(ctx)
	}
	if err != nil {
		tb.Fatal(err)
	}
	if st := h.faults.Stats(); st.Accepted == 0 {
		tb.Fatalf("the client reached the server without its proxies: %+v", st)
	}
	return h
}

// slowLoss is how the work of a slow holder ended early.
type slowLoss struct {
	at      time.Time
	refresh int       // keep-alive refreshes seen before
	cause   error     // context.Cause of the work's context
	info    lock.Info // the key as the server saw it then
	infoErr error
}

func (x *slowLoss) Error() string {
	held := fmt.Sprintf("the server still held it for %v", x.info.TTL)
	if x.infoErr != nil {
		held = fmt.Sprintf("the server no longer held it: %v", x.infoErr)
	}
	return fmt.Sprintf("work cancelled after %d refreshes: %v; %s", x.refresh, x.cause, held)
}

func (x *slowLoss) Unwrap() error { return x.cause }

// hold is the work: it returns once the keep-alive has refreshed the lock
// slowRefreshes times and the key is still the holder's, or a *slowLoss
// when work ends first.
func (h *slowHolder) hold(ctx, work context.Context, key, token string) error {
	for n := 0; n < slowRefreshes; {
		select {
		case <-work.Done():
			x := &slowLoss{at: time.Now(), refresh: n, cause: context.Cause(work)}
			x.info, x.infoErr = h.direct.Inspect(ctx, key)
			if x.infoErr == nil && x.info.Token != token {
				x.infoErr = fmt.Errorf("taken by %q", x.info.Token)
			}
			return x
		case <-h.refreshed:
			n++
		}
	}
	info, err := h.direct.Inspect(ctx, key)
	switch {
	case err != nil:
		return fmt.Errorf("after %d refreshes: %w", slowRefreshes, err)
	case info.Token != token:
		return fmt.Errorf("after %d refreshes the key is %q's", slowRefreshes, info.Token)
	}
	return nil
}

// drain forgets refreshes reported before an attempt.
func (h *slowHolder) drain() {
	for {
		select {
		case <-h.refreshed:
		default:
			return
		}
	}
}

// excused reports whether a loss x came while this process was stalled,
// or the server answered late, for half the slack or more (a busy
// machine): then the attempt is repeated with the TTL doubled, up to three
// times. It logs why.
func excused(t *testing.T, late lateness, x *slowLoss, ttl time.Duration, attempt int) bool {
	t.Helper()
	st := late.Within(x.at.Add(-ttl), x.at)
	if st < slowSlack(ttl)/2 || attempt >= 3 {
		return false
	}
	t.Logf("attempt %d (TTL %v, round trip %v): %v, while the process was stalled %v; again with a TTL of %v",
		attempt, ttl, slowRTT(ttl), x, st.Round(time.Millisecond), 2*ttl)
	return true
}

// TestClient_Do_slowRoundTrips holds a lock with Do over a path whose
// round trip is longer than the refresh interval: the work runs for
// several refresh periods and its context is not cancelled while the
// server holds the lock.
func TestClient_Do_slowRoundTrips(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		h := newSlowHolder(t, s)
		late := newLateness(t, s)
		for ttl, attempt := slowTTL, 1; ; ttl, attempt = 2*ttl, attempt+1 {
			h.faults.SetLatency(slowRTT(ttl) / 2) // each way
			h.drain()
			key := redistest.Key(t, "lock")
			err := h.c.Do(ctx, key, ttl, func(work context.Context) error {
				return h.hold(ctx, work, key, lock.FromContext(work).Token())
			})
			if x := (*slowLoss)(nil); errors.As(err, &x) {
				if excused(t, late, x, ttl, attempt) {
					continue
				}
				t.Fatalf("TTL %v, round trip %v: %v (stalled %v in its last TTL)",
					ttl, slowRTT(ttl), x, late.Within(x.at.Add(-ttl), x.at).Round(time.Millisecond))
			}
			if err != nil {
				t.Fatalf("TTL %v, round trip %v: Do = %v", ttl, slowRTT(ttl), err)
			}
			return
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Redis7, redistest.Cluster, redistest.Miniredis)
}

// TestLock_KeepAlive_slowRoundTrips is TestClient_Do_slowRoundTrips with
// Obtain and KeepAlive, as package cache keeps its rebuild claims.
func TestLock_KeepAlive_slowRoundTrips(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx := testCtx(t)
		h := newSlowHolder(t, s)
		late := newLateness(t, s)
		for ttl, attempt := slowTTL, 1; ; ttl, attempt = 2*ttl, attempt+1 {
			h.faults.SetLatency(slowRTT(ttl) / 2)
			h.drain()
			key := redistest.Key(t, "lock")
			l, err := h.c.Obtain(ctx, key, ttl)
			if err != nil {
				t.Fatal(err)
			}
			held, stop := l.KeepAlive(ctx, ttl, 0)
			err = h.hold(ctx, held, key, l.Token())
			cause := stop()
			if x := (*slowLoss)(nil); errors.As(err, &x) {
				if excused(t, late, x, ttl, attempt) {
					continue
				}
				t.Fatalf("TTL %v, round trip %v: %v (stalled %v in its last TTL)",
					ttl, slowRTT(ttl), x, late.Within(x.at.Add(-ttl), x.at).Round(time.Millisecond))
			}
			if err != nil {
				t.Fatalf("TTL %v, round trip %v: %v", ttl, slowRTT(ttl), err)
			}
			if cause != nil {
				t.Errorf("stop() = %v after the work, want nil", cause)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("Release: %v", err)
			}
			return
		}
	}, redistest.Redis8, redistest.Valkey, redistest.Redis7, redistest.Cluster, redistest.Miniredis)
}
