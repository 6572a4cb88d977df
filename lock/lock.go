package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

//go:embed obtain_fenced.lua
var obtainFencedSrc string

// Client obtains locks on one Redis-protocol server or cluster. It is safe
// for concurrent use. Use New to create a Client.
type Client struct {
	conn         *redisx.Conn
	maxMetadata  int
	obtainFenced *redis.Script
	logger       *slog.Logger
	observer     func(Event) // called outside any lock; see Options.Observer
	threshold    int         // DigestThreshold

	handoff    *redis.Script           // handoff.lua
	handoffOff atomic.Pointer[refusal] // the server's refusal of the hand-off script; nil while it runs
	handoffLog atomic.Pointer[string]  // the refusal last warned of; nil once the script ran again
	pubDenied  atomic.Bool             // a hand-off's PUBLISH was refused (warned once)
	sharded    keysub.Probe            // whether the server has sharded pub/sub
	waker      waker
}

// New returns a Client using rc. It makes no server call: the server's
// capabilities are probed on first use (see Capabilities).
//
// Concurrent calls on a Client share pipelines. rc may be go-redis's
// automatic pipeliner (rdb.AutoPipeline()), which streams concurrent
// commands on a connection it holds: the Client then sends each command
// at once and leaves the batching to it, for about twice the lock cycles
// a second of the raw commands.
func New(rc RedisClient, opts *Options) (*Client, error) {
	if redisx.IsNilClient(rc) {
		return nil, invalid("rc is nil: New needs a Redis client")
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	return &Client{
		conn:         redisx.NewConn(rc, nil, opts.digestThreshold()),
		maxMetadata:  opts.maxMetadata(),
		obtainFenced: redis.NewScript(obtainFencedSrc),
		logger:       opts.logger(),
		observer:     opts.observer(),
		threshold:    opts.digestThreshold(),
		handoff:      redis.NewScript(handoffSrc),
	}, nil
}

// CapabilitiesFor is Capabilities probing, on the first call, with a key
// named after key (key followed by ":probe:" and random hex) rather than
// one starting "stampede:probe:": an ACL that lets the user at key lets it
// at the probe. Obtain probes this way on its first call; a service that
// calls CapabilitiesFor at start keeps the probe's round trip off its
// first Obtain.
func (c *Client) CapabilitiesFor(ctx context.Context, key string) (Capabilities, error) {
	caps, err := c.conn.CapabilitiesFor(ctx, key)
	return c.public(caps), err
}

// Capabilities returns the strategies in use on the client's server,
// probing it on the first call.
func (c *Client) Capabilities(ctx context.Context) (Capabilities, error) {
	caps, err := c.conn.Capabilities(ctx)
	return c.public(caps), err
}

// public is caps, as the Client's connection learnt them, in their public
// form, with the Client's own refusal of the hand-off script.
func (c *Client) public(caps redisx.Capabilities) Capabilities {
	if r := c.handoffOff.Load(); r != nil {
		caps.HandoffDenied = r.reply
	}
	return redisx.Mirror[Capabilities](caps)
}

// Lock is one acquisition of a key. Its methods are safe for concurrent
// use; they act only while the key still holds this acquisition's value.
type Lock struct {
	c     *Client
	key   string
	value string
	token string
	meta  string
	fence int64
	sent  time.Time // when the attempt that obtained it was sent: it is held until at least sent+ttl

	// handoff is set for a lock obtained with a Retry where hand-off works:
	// its release hands it to the first live waiter.
	handoff *handoffKeys
}

// Key returns the locked key.
func (l *Lock) Key() string { return l.key }

// Token returns the random token that identifies this acquisition.
func (l *Lock) Token() string { return l.token }

// Metadata returns the metadata stored with the lock.
func (l *Lock) Metadata() string { return l.meta }

// Fence returns the acquisition's fencing number, or 0 without
// WithFencing. Numbers for one key grow with every acquisition,
// across processes and expiries, so a store that remembers the largest
// number it has seen can reject writes from a holder that lost the lock
// while paused.
//
// Each number is the larger of the key's previous number plus one and the
// server's clock in microseconds since the Unix epoch when it was drawn, so
// numbers are not consecutive. The clock keeps them growing when the
// server loses the counter (a restart without persistence, an eviction) or
// a promoted replica holds an older one, provided the clock of the server
// drawing the number is ahead of the last number drawn before.
//
// WARNING: a server whose clock is behind the last number drawn (a clock set
// back, or a replica's clock behind its old master's) and that has lost the
// counter or holds an older one can hand out a number that was already
// drawn; see docs/locks.md, "Guarantees and their limits".
func (l *Lock) Fence() int64 { return l.fence }

// Obtain takes the lock on key for ttl, with one SET NX PX round trip (a
// script when fencing). If the lock is held it returns ErrNotObtained, or
// with WithRetry waits and tries again until WithMaxWait, the context's
// deadline or, lacking both, ttl has passed. A ctx that has ended, before
// or during the wait, returns errors.Join(ErrNotObtained, ctx.Err()), and an
// ended ctx makes no attempt. Its options are WithRetry, WithMaxWait,
// WithMetadata and WithFencing; no option means one attempt, no metadata,
// no fencing.
func (c *Client) Obtain(ctx context.Context, key string, ttl time.Duration, opts ...ObtainOption) (*Lock, error) {
	return c.obtainWith(ctx, key, ttl, obtainSettings(opts))
}

// obtainWith obtains the lock for Obtain, Do and RunOnce once their
// options are gathered: it checks the arguments, obtains and reports.
func (c *Client) obtainWith(ctx context.Context, key string, ttl time.Duration, opts *callSettings) (*Lock, error) {
	if err := c.checkObtain(key, ttl, opts); err != nil {
		return nil, err
	}
	fenceKey := ""
	if opts.fencing {
		var ok bool
		if fenceKey, ok = FenceKey(key); !ok {
			return nil, invalid("WithFencing on key %q: %v", key, redisx.ErrNoSlot)
		}
	}
	start := time.Now()
	l, err := c.obtain(ctx, key, fenceKey, ttl, opts, start)
	d := time.Since(start)
	switch {
	case err == nil:
		c.emit(ctx, EventObtained, key, d, nil)
		failpoint.Inject(ctx, failpoint.LockObtained)
	case errors.Is(err, ErrNotObtained):
		c.emit(ctx, EventNotObtained, key, d, err)
	default:
		c.serverError(ctx, "obtain", key, err)
		c.emit(ctx, EventObtainFailed, key, d, err)
	}
	return l, err
}

// ctxEnded reports whether err says a context ended.
func ctxEnded(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (c *Client) checkObtain(key string, ttl time.Duration, opts *callSettings) error {
	switch {
	case key == "":
		return invalid("key is empty")
	case ttl < time.Millisecond:
		return invalid("ttl %v for key %q is below 1ms", ttl, key)
	case len(opts.metadata) > c.maxMetadata:
		return invalid("WithMetadata of %d bytes for key %q is longer than Options.MaxMetadata (%d bytes)", len(opts.metadata), key, c.maxMetadata)
	case opts.maxWait < 0:
		return invalid("WithMaxWait %v for key %q is negative", opts.maxWait, key)
	}
	return nil
}

// Release deletes the lock if it is still this acquisition's, in one round
// trip. It returns ErrNotHeld, and leaves the key alone, if the lock
// expired or is now someone else's. A lock obtained with a Retry is handed
// instead to the first live waiter queued for it, in the same round trip,
// and that waiter is notified (see WithRetry).
func (l *Lock) Release(ctx context.Context) error { return l.release(ctx, true) }

// release is Release; warnNotHeld says whether finding the lock not held
// is logged here (Do and RunOnce log it once, as a lost lock).
func (l *Lock) release(ctx context.Context, warnNotHeld bool) error {
	failpoint.Inject(ctx, failpoint.LockRelease)
	var ok, done bool
	var err error
	if l.handoff != nil && l.c.handoffOn() {
		ok, done, err = l.c.releaseHandoff(ctx, *l.handoff, l.value)
	}
	if !done {
		ok, err = l.c.conn.DeleteIfEqual(ctx, l.key, l.value)
	}
	d := time.Since(l.sent)
	switch {
	case err != nil:
		err = fmt.Errorf("lock: release %q: %w", l.key, err)
		l.c.serverError(ctx, "release", l.key, err)
		l.c.emit(ctx, EventReleaseFailed, l.key, d, err)
		return err
	case !ok:
		if warnNotHeld {
			l.c.log(slog.LevelWarn, "lock expired or was taken before release", "key", l.key, "held", d)
		}
		l.c.emit(ctx, EventReleaseFailed, l.key, d, ErrNotHeld)
		return ErrNotHeld
	}
	l.c.emit(ctx, EventReleased, l.key, d, nil)
	return nil
}

// Refresh sets the lock to expire ttl from now if it is still this
// acquisition's. Otherwise it returns ErrNotHeld at once and changes
// nothing.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	return l.refresh(ctx, ttl, true)
}

// refresh is Refresh; warnNotHeld says whether finding the lock not held
// is logged here (RunOnce logs it once, as a lost lock).
func (l *Lock) refresh(ctx context.Context, ttl time.Duration, warnNotHeld bool) error {
	if ttl < time.Millisecond {
		return invalid("Refresh ttl %v for key %q is below 1ms", ttl, l.key)
	}
	err := l.extend(ctx, ttl)
	d := time.Since(l.sent)
	switch {
	case err == nil:
		l.c.emit(ctx, EventRefreshed, l.key, d, nil)
	case errors.Is(err, ErrNotHeld):
		if warnNotHeld {
			l.c.log(slog.LevelWarn, "refresh failed: the lock expired or was taken", "key", l.key, "held", d)
		}
		l.c.emit(ctx, EventRefreshFailed, l.key, d, err)
	default:
		l.c.serverError(ctx, "refresh", l.key, err)
		l.c.emit(ctx, EventRefreshFailed, l.key, d, err)
	}
	return err
}

// extend is the refresh itself, reporting nothing: the keep-alive reports
// its refreshes from its own goroutine.
func (l *Lock) extend(ctx context.Context, ttl time.Duration) error {
	ok, err := l.c.conn.ExpireIfEqual(ctx, l.key, l.value, ttl)
	if err != nil {
		return fmt.Errorf("lock: refresh %q: %w", l.key, err)
	}
	if !ok {
		return ErrNotHeld
	}
	return nil
}

// TTL returns how long the lock has left, or ErrNotHeld if it is no longer
// this acquisition's.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	ttl, ok, err := l.c.conn.TTLIfEqual(ctx, l.key, l.value)
	if err != nil {
		return 0, fmt.Errorf("lock: ttl %q: %w", l.key, err)
	}
	if !ok {
		return 0, ErrNotHeld
	}
	return ttl, nil
}

// Inspect reads who holds the lock on key, without taking it. It returns
// ErrNotHeld if nobody does and ErrForeignValue if the key holds something
// else.
func (c *Client) Inspect(ctx context.Context, key string) (Info, error) {
	if key == "" {
		return Info{}, invalid("key is empty")
	}
	pipe := c.conn.Client().Pipeline()
	get := pipe.Get(ctx, key)
	pttl := pipe.PTTL(ctx, key)
	_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	v, err := get.Result()
	switch {
	case redisx.IsNil(err):
		return Info{}, ErrNotHeld
	case err != nil:
		return Info{}, fmt.Errorf("lock: inspect %q: %w", key, err)
	}
	info, ok := decodeValue(v)
	if !ok {
		return Info{}, ErrForeignValue
	}
	if info.TTL, err = pttl.Result(); err != nil {
		return Info{}, fmt.Errorf("lock: inspect %q: %w", key, err)
	}
	return info, nil
}

// Replace ends the lock by putting value in its place, expiring after ttl,
// in one round trip, if the key still holds this acquisition; otherwise it
// returns ErrNotHeld and changes nothing. The lock then stands for "this
// key is being computed" and hands the key over to its result in one
// atomic step: nobody ever finds the key empty between the two, and
// whoever deleted or overwrote the key meanwhile wins. An idempotent
// payment, for one, locks its idempotency key while it charges and
// replaces the lock with the receipt, which later attempts find instead
// (see the example).
//
// A Replace that finds the lock taken or expired is an answer, not a
// failure to log (unlike Release, it logs no warning for it). It reports
// as a Release does: EventReleased on success, EventReleaseFailed
// otherwise. Unlike Release, it hands nothing to waiters queued for the
// lock (WithRetry): they find the key taken by the value and
// give up at their WithMaxWait. A ttl below 1ms is an error matching
// ErrInvalid.
func (l *Lock) Replace(ctx context.Context, value string, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return invalid("Replace ttl %v for key %q is below 1ms", ttl, l.key)
	}
	ok, err := l.c.conn.SetIfEqual(ctx, l.key, l.value, value, ttl)
	return l.replaced(ctx, ok, err)
}

// ReplaceAndPublish is Replace that also publishes message on channel
// (SPUBLISH when sharded, else PUBLISH), in the same script on the server
// and only if it replaced the lock: a subscriber hears of the value
// exactly when it was stored, one round trip sooner than from a publish
// sent after Replace returned, and never of a value that was not stored.
// It is safe for concurrent use, and reports as Replace does.
//
// It returns nil when it replaced the lock and published message, and
// Replace's errors otherwise (ErrNotHeld: neither happened), except when
// it replaced the lock without publishing: then its error matches
// ErrNotPublished, and also ErrPermission when the ACL refused the
// publish. Where one script cannot do both (the server refuses scripts
// to the client's user; on a Redis Cluster or Ring, channel is not in
// key's slot: give both one hash tag), it replaces the lock as Replace
// does, publishes nothing, and returns such an error: the caller publishes
// itself if it needs to. A ttl below 1ms and an empty channel are errors
// matching ErrInvalid.
func (l *Lock) ReplaceAndPublish(ctx context.Context, value string, ttl time.Duration, channel, message string, sharded bool) error {
	if ttl < time.Millisecond {
		return invalid("ReplaceAndPublish ttl %v for key %q is below 1ms", ttl, l.key)
	}
	if channel == "" {
		return invalid("ReplaceAndPublish channel for key %q is empty", l.key)
	}
	pub := redisx.Publication{Channel: channel, Message: message, Sharded: sharded}
	ok, pubErr, err := l.c.conn.SetIfEqualPublish(ctx, l.key, l.value, value, ttl, pub)
	if errors.Is(err, redisx.ErrNotCombined) {
		if err := l.Replace(ctx, value, ttl); err != nil {
			return err
		}
		return fmt.Errorf("lock: replace %q: %w: %w", l.key, ErrNotPublished, err)
	}
	if err := l.replaced(ctx, ok, err); err != nil {
		return err
	}
	if pubErr != nil {
		return fmt.Errorf("lock: replace %q: %w: %w", l.key, ErrNotPublished, redisx.Denied("publish", pubErr, ""))
	}
	return nil
}

// replaced reports a Replace (or one of ReplaceMany) whose conditional
// write returned ok and err, and returns its error.
func (l *Lock) replaced(ctx context.Context, ok bool, err error) error {
	d := time.Since(l.sent)
	switch {
	case err != nil:
		err = fmt.Errorf("lock: replace %q: %w", l.key, err)
		l.c.serverError(ctx, "replace", l.key, err)
		l.c.emit(ctx, EventReleaseFailed, l.key, d, err)
		return err
	case !ok:
		l.c.emit(ctx, EventReleaseFailed, l.key, d, ErrNotHeld)
		return ErrNotHeld
	}
	l.c.emit(ctx, EventReleased, l.key, d, nil)
	return nil
}

// FenceKey returns the key holding the fencing counter of the lock on key
// (see WithFencing), in the same cluster slot as key; ok is false
// for keys that cannot have one (a '}' but no hash tag). The counter has
// no TTL. Numbers drawn after it is deleted start from the server's clock
// (see Lock.Fence), so losing it keeps numbers growing as long as that
// clock is ahead of the last number drawn; still, delete it only when the
// lock's key is retired for good. A counter holding anything but an
// integer below 2^53 makes a fenced Obtain fail, leaving the lock and the
// counter as they were.
func FenceKey(key string) (fenceKey string, ok bool) { return redisx.Sibling(key, "fence") }
