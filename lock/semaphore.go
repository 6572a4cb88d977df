package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/lockvalue"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// A semaphore is one sorted set on the server: a member per permit (its
// token), scored by when it expires in the server's clock (ms). One
// script (semaphore.lua) acquires, refreshes and releases, each first
// dropping the expired permits, so that a holder that died frees its
// place after its TTL with nobody releasing it. A release publishes on a
// channel beside the key (semChannel, same cluster slot), on which the
// waiters of every process are subscribed through the Client's keysub hub
// (the one hand-off uses); each process wakes one of its waiters per
// notice (semWakeLocked). The waiters' poll, at the earliest expiry the
// full semaphore reported and at most every poll interval, is the safety
// net for a notice lost, refused or not listened to (the probe not knowing
// the server's pub/sub mode yet).

//go:embed semaphore.lua
var semaphoreSrc string

// defaultSemPoll is the default of WithPollInterval.
const defaultSemPoll = 250 * time.Millisecond

// Semaphore caps how many holders, in every process sharing the server,
// hold a permit of it at once: at most its limit. Permits expire after
// their TTL unless refreshed (Permit.Refresh, Permit.KeepAlive), so a
// process killed while holding one frees its place after that TTL. It is
// safe for concurrent use. Use Client.Semaphore to create one.
//
// Waiters are not served in the order they came (no FIFO): a released
// permit goes to whichever waiter's attempt reaches the server first.
type Semaphore struct {
	c       *Client
	key     string
	channel string // release notices; semChannel(key)
	limit   int
	ttl     time.Duration
	poll    time.Duration
	script  *redis.Script
}

// Permit is one held place of a Semaphore. Its methods are safe for
// concurrent use; they act only while the permit is still held.
type Permit struct {
	s     *Semaphore
	token string
	sent  time.Time // when the acquiring attempt was sent: held until at least sent+ttl
}

// SemaphoreOption is an option of Client.Semaphore: WithPollInterval.
type SemaphoreOption interface{ applySemaphore(*semSettings) }

type semSettings struct{ poll time.Duration }

// semSetting is a SemaphoreOption.
type semSetting func(*semSettings)

func (f semSetting) applySemaphore(s *semSettings) { f(s) }

// WithPollInterval sets how often, at most, a waiting Acquire tries again
// when no release notice wakes it (notices lost, refused by the server's
// ACL, or not subscribed yet); it also tries when the earliest permit
// expires. It must be at least 1ms. Each wait is drawn between half of it
// and all of it, so that waiters of many processes spread their attempts.
// Default: 250ms.
func WithPollInterval(d time.Duration) SemaphoreOption {
	return semSetting(func(s *semSettings) { s.poll = d })
}

// semChannel returns the channel on which releases of the semaphore on
// key are announced (the message is the released permit's token), in the
// same cluster slot as key; ok is false for keys that cannot have one (a
// '}' but no hash tag).
func semChannel(key string) (string, bool) { return redisx.Sibling(key, "released") }

// Semaphore returns the semaphore on key allowing limit permits at once,
// each expiring ttl after it was acquired or last refreshed. It makes no
// server call. Every process using key must give the same limit: each
// acquisition compares the permits held with its caller's limit.
//
// The semaphore is one key on the server (a sorted set, expiring with its
// last permit), so on a Cluster it lives in one slot; its release notices
// go on a channel in that slot (key's sibling "released", see
// docs/permissions.md). It needs scripting (EVALSHA, EVAL) on the server.
// key must not be empty, nor contain a '}' without a hash tag; limit must be
// at least 1 and ttl at least 1ms. Its option is WithPollInterval.
func (c *Client) Semaphore(key string, limit int, ttl time.Duration, opts ...SemaphoreOption) (*Semaphore, error) {
	st := semSettings{poll: defaultSemPoll}
	for _, o := range opts {
		if o != nil {
			o.applySemaphore(&st)
		}
	}
	ch, ok := semChannel(key)
	switch {
	case key == "":
		return nil, invalid("Semaphore key is empty")
	case !ok:
		return nil, invalid("Semaphore key %q: %v", key, redisx.ErrNoSlot)
	case limit < 1:
		return nil, invalid("Semaphore limit %d for key %q is below 1", limit, key)
	case ttl < time.Millisecond:
		return nil, invalid("Semaphore ttl %v for key %q is below 1ms", ttl, key)
	case st.poll < time.Millisecond:
		return nil, invalid("WithPollInterval %v for semaphore %q is below 1ms", st.poll, key)
	}
	return &Semaphore{c: c, key: key, channel: ch, limit: limit, ttl: ttl, poll: st.poll, script: redis.NewScript(semaphoreSrc)}, nil
}

// Key returns the semaphore's key.
func (s *Semaphore) Key() string { return s.key }

// Limit returns how many permits the semaphore allows at once.
func (s *Semaphore) Limit() int { return s.limit }

// TryAcquire takes a permit if fewer than the limit are held, in one round
// trip, and returns ErrNotObtained at once if not. A ctx that has ended
// makes no attempt and returns errors.Join(ErrNotObtained, ctx.Err()).
func (s *Semaphore) TryAcquire(ctx context.Context) (*Permit, error) {
	start := time.Now()
	if ctx.Err() != nil {
		return s.acquired(ctx, nil, notObtained(ctx), start)
	}
	p, _, err := s.try(ctx)
	if err == nil && p == nil {
		err = ErrNotObtained
	}
	return s.acquired(ctx, p, err, start)
}

// Acquire takes a permit, waiting while the limit is held: until a release
// in any process wakes it (a notice on the semaphore's channel), the
// earliest permit expires, or the poll interval (WithPollInterval) passes,
// and then it tries again; until ctx ends. Waiters are not served in
// order: whichever attempt reaches the server first gets a freed place.
//
// A ctx that ends while it waits returns an error naming the semaphore
// that matches ErrNotObtained and ctx's error; a failed server call
// returns that call's error (matching ErrPermission when the server's ACL
// refused it).
func (s *Semaphore) Acquire(ctx context.Context) (*Permit, error) {
	start := time.Now()
	p, err := s.acquire(ctx)
	return s.acquired(ctx, p, err, start)
}

// acquired reports the end of an Acquire or TryAcquire begun at start, as
// Obtain reports its own, and returns its result.
func (s *Semaphore) acquired(ctx context.Context, p *Permit, err error, start time.Time) (*Permit, error) {
	d := time.Since(start)
	switch {
	case err == nil:
		s.c.emit(ctx, EventObtained, s.key, d, nil)
	case errors.Is(err, ErrNotObtained):
		s.c.emit(ctx, EventNotObtained, s.key, d, err)
	default:
		s.c.serverError(ctx, "acquire permit", s.key, err)
		s.c.emit(ctx, EventObtainFailed, s.key, d, err)
	}
	return p, err
}

// acquire is Acquire without the reporting.
func (s *Semaphore) acquire(ctx context.Context) (*Permit, error) {
	if err := ctx.Err(); err != nil {
		return nil, s.ended(ctx)
	}
	p, wait, err := s.try(ctx)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, s.ended(ctx)
	case p != nil || err != nil:
		return p, err
	}
	// Full. Listen for releases before the next attempt, so that one
	// between that attempt and the wait is heard.
	sw := s.c.semWaitAdd(ctx, s.channel)
	defer s.c.semWaitRemove(s.channel, sw)
	ready := sw.ready
	for {
		// Wait for the subscription's confirmation (at most one step),
		// then for a release, the earliest expiry or the poll.
		d := min(wait, s.pollStep())
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, s.ended(ctx)
		case <-ready:
			ready = nil
		case <-sw.wake:
		case <-t.C:
		}
		t.Stop()
		if !sw.listening && s.c.semListen(ctx, s.channel, sw) {
			ready = sw.ready
		}
		if p, wait, err = s.try(ctx); p != nil || err != nil {
			if err != nil && ctx.Err() != nil {
				return nil, s.ended(ctx)
			}
			return p, err
		}
		if !sw.armed && ready == nil && sw.listening {
			s.c.semArmed(sw)
		}
	}
}

// pollStep is the wait before a waiter's next attempt when nothing wakes
// it: between half the poll interval and all of it.
func (s *Semaphore) pollStep() time.Duration {
	return s.poll/2 + rand.N(s.poll/2+1)
}

// ended is the error of an Acquire whose ctx ended before it got a permit.
func (s *Semaphore) ended(ctx context.Context) error {
	return fmt.Errorf("lock: semaphore %q (limit %d) had no permit free before the context ended: %w", s.key, s.limit, notObtained(ctx))
}

// try makes one attempt: a permit, or nil and how long until the earliest
// permit expires.
func (s *Semaphore) try(ctx context.Context) (p *Permit, wait time.Duration, err error) {
	token := lockvalue.NewToken()
	sent := time.Now()
	r, err := s.script.Run(ctx, s.c.conn.Client(), []string{s.key}, "a", token, s.limit, s.ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return nil, 0, s.failed("acquire", err)
	}
	if len(r) != 2 {
		return nil, 0, fmt.Errorf("lock: semaphore %q: unexpected reply %v from the semaphore script", s.key, r)
	}
	if r[0] == 1 {
		return &Permit{s: s, token: token, sent: sent}, 0, nil
	}
	return nil, time.Duration(r[1]) * time.Millisecond, nil
}

// failed wraps the error of the semaphore's op.
func (s *Semaphore) failed(op string, err error) error {
	return fmt.Errorf("lock: semaphore %q: %s: %w", s.key, op, redisx.Denied("semaphore "+op+" (script)", err,
		"grant the user +evalsha, +eval and the commands and channel of docs/permissions.md, \"Semaphores\""))
}

// Key returns the key of the permit's semaphore.
func (p *Permit) Key() string { return p.s.key }

// Token returns the random token that identifies this permit.
func (p *Permit) Token() string { return p.token }

// Release gives the permit back, in one round trip, and wakes a waiter of
// every process waiting for the semaphore. It returns ErrNotHeld if the
// permit expired or was released already.
func (p *Permit) Release(ctx context.Context) error {
	s := p.s
	mode := ""
	switch s.c.pubsubMode(ctx, s.channel) {
	case keysub.Sharded:
		mode = "s"
	case keysub.Unknown:
		mode = "b"
	}
	r, err := s.script.Run(ctx, s.c.conn.Client(), []string{s.key}, "r", p.token, s.channel, mode).Slice()
	d := time.Since(p.sent)
	if err == nil && len(r) != 2 {
		err = fmt.Errorf("unexpected reply %v from the semaphore script", r)
	}
	if err != nil {
		err = s.failed("release", err)
		s.c.serverError(ctx, "release permit", s.key, err)
		s.c.emit(ctx, EventReleaseFailed, s.key, d, err)
		return err
	}
	if refusal, _ := r[1].(string); refusal != "" {
		s.c.publishRefused(refusal)
	}
	if held, _ := r[0].(int64); held != 1 {
		s.c.log(slog.LevelWarn, "semaphore permit expired before release", "key", s.key, "held", d)
		s.c.emit(ctx, EventReleaseFailed, s.key, d, ErrNotHeld)
		return ErrNotHeld
	}
	s.c.emit(ctx, EventReleased, s.key, d, nil)
	return nil
}

// Refresh sets the permit to expire ttl from now if it is still held.
// Otherwise it returns ErrNotHeld at once and changes nothing.
func (p *Permit) Refresh(ctx context.Context, ttl time.Duration) error {
	s := p.s
	if ttl < time.Millisecond {
		return invalid("Refresh ttl %v for semaphore %q is below 1ms", ttl, s.key)
	}
	err := p.extend(ctx, ttl)
	d := time.Since(p.sent)
	switch {
	case err == nil:
		s.c.emit(ctx, EventRefreshed, s.key, d, nil)
	case errors.Is(err, ErrNotHeld):
		s.c.log(slog.LevelWarn, "refresh failed: the semaphore permit expired", "key", s.key, "held", d)
		s.c.emit(ctx, EventRefreshFailed, s.key, d, err)
	default:
		s.c.serverError(ctx, "refresh permit", s.key, err)
		s.c.emit(ctx, EventRefreshFailed, s.key, d, err)
	}
	return err
}

// KeepAlive refreshes the permit back to ttl every interval (a third of
// ttl when interval is 0) until stop is called, as Lock.KeepAlive keeps a
// lock: the returned context, derived from ctx, is cancelled with a cause
// matching ErrLost when a refresh finds the permit expired, or when no
// refresh has succeeded in time (a margin before it would expire). stop
// ends the refreshing, waits for it, cancels the context and returns its
// cause (nil if the permit was never lost); it does not release the
// permit. The refreshes are reported as Lock.KeepAlive's are.
func (p *Permit) KeepAlive(ctx context.Context, ttl, interval time.Duration) (held context.Context, stop func() error) {
	if interval <= 0 || interval >= ttl {
		interval = max(ttl/3, time.Millisecond)
	}
	return keepAliveFrom(ctx, p, ttl, interval, assumedSet(p.sent, interval))
}

func (p *Permit) keptBy() (*Client, string, time.Time) { return p.s.c, p.s.key, p.sent }

// extend is the refresh itself, reporting nothing.
func (p *Permit) extend(ctx context.Context, ttl time.Duration) error {
	s := p.s
	n, err := s.script.Run(ctx, s.c.conn.Client(), []string{s.key}, "f", p.token, ttl.Milliseconds()).Int64()
	if err != nil {
		return s.failed("refresh", err)
	}
	if n != 1 {
		return ErrNotHeld
	}
	return nil
}

// lost reports the loss of the permit while its work ran (see Lock.lost).
func (p *Permit) lost(ctx context.Context, err error, owned bool) {
	s, d := p.s, time.Since(p.sent)
	s.c.log(slog.LevelWarn, "semaphore permit lost while its work ran", "key", s.key, "held", d, "err", err)
	if owned {
		s.c.emitOwned(EventLost, s.key, d, err)
	} else {
		s.c.emit(ctx, EventLost, s.key, d, err)
	}
}

// semWaiter is one waiting Acquire's registration with the Client's
// waker. Its fields but wake are written by the Acquire only, under the
// waker's mu once it is registered.
type semWaiter struct {
	wake      chan struct{} // a release notice; buffered, one pending at most
	ready     <-chan struct{}
	sub       *keysub.Sub // nil while the channel's mode is not known
	listening bool        // subscribed in the mode the server has (or cannot be)
	armed     bool        // listening, confirmed, and an attempt made since: only a notice or the poll lets it in now
}

// semArmed marks sw armed (semWaiter.armed), for the tests.
func (c *Client) semArmed(sw *semWaiter) {
	c.waker.mu.Lock()
	sw.armed = true
	c.waker.mu.Unlock()
}

// semWaitAdd registers a waiter on the semaphore channel. Where the probe
// knows the server's pub/sub mode it subscribes in it, and ready is closed
// once the server confirmed the subscription; where it does not, it
// subscribes nothing (ready is nil), and semListen asks again at each of
// the waiter's attempts.
func (c *Client) semWaitAdd(ctx context.Context, channel string) *semWaiter {
	sw := &semWaiter{wake: make(chan struct{}, 1)}
	c.semListen(ctx, channel, sw)
	w := &c.waker
	w.mu.Lock()
	if w.sems == nil {
		w.sems = map[string][]*semWaiter{}
	}
	w.sems[channel] = append(w.sems[channel], sw)
	w.mu.Unlock()
	return sw
}

// semListen subscribes sw to channel if the probe knows the mode now, and
// reports whether it did (or never will: the client cannot subscribe).
func (c *Client) semListen(ctx context.Context, channel string, sw *semWaiter) bool {
	mode := c.pubsubMode(ctx, channel)
	if mode == keysub.Unknown {
		return false
	}
	sub, ready, _ := c.wakeHub().Add(ctx, channel, mode == keysub.Sharded)
	w := &c.waker
	w.mu.Lock() // the tests read them (SemListening)
	sw.sub, sw.ready, sw.listening = sub, ready, true
	w.mu.Unlock()
	return true
}

// semWaitRemove unregisters sw. A notice it was sent and did not act on
// goes to another waiter of the channel: the place it announced may still
// be free.
func (c *Client) semWaitRemove(channel string, sw *semWaiter) {
	w := &c.waker
	w.mu.Lock()
	ws := w.sems[channel]
	for i, x := range ws {
		if x == sw {
			ws = append(ws[:i:i], ws[i+1:]...)
			break
		}
	}
	if len(ws) == 0 {
		delete(w.sems, channel)
	} else {
		w.sems[channel] = ws
		select {
		case <-sw.wake:
			semWakeLocked(ws)
		default:
		}
	}
	w.mu.Unlock()
	if sw.sub != nil {
		c.wakeHub().Remove(sw.sub)
	}
}

// semWakeLocked wakes the first of ws (oldest first) with no wake-up
// pending: one released permit, one waiter of this process to try for it
// (the other processes wake one each too; one of them gets it). A waiter
// with one pending tries anyway.
func semWakeLocked(ws []*semWaiter) {
	for _, sw := range ws {
		select {
		case sw.wake <- struct{}{}:
			return
		default:
		}
	}
}
