package lock

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
)

// waker delivers hand-off notices to the waiting Obtains of one Client. Its
// subscriptions are internal/keysub's: one pub/sub connection per
// subscription target (the client itself, or, with sharded pub/sub on a
// Redis Cluster, each master that owns a waited key's slot), subscribed to
// the channel of each key that has a waiter here, opened by the first
// waiter and closed ten seconds after the last one left. A channel is
// unsubscribed as soon as its last waiter leaves. The zero value is ready
// to use.
type waker struct {
	once    sync.Once
	hub     *keysub.Hub
	mu      sync.Mutex              // guards waiters and sems; held only for map updates and sends that cannot block
	waiters map[string]*wakeWaiter  // token -> its wake-up and subscription
	sems    map[string][]*semWaiter // semaphore release channel -> its waiters here, oldest first (semaphore.go)
}

// wakeWaiter is one waiting Obtain's registration. Its fields but wake are
// the Obtain's own: only its goroutine reads or writes them.
type wakeWaiter struct {
	wake      chan struct{} // the hand-off notice, or the call to a re-probe step
	sub       *keysub.Sub   // nil while the channel's mode is not known
	listening bool          // a hand-off to this waiter reaches it: it may queue (see wakerListen)
	tries     int           // re-probe steps so far
	step      *time.Timer   // the pending re-probe step; stopped by wakerRemove
}

// wakeHub returns the Client's hub, made on first use.
func (c *Client) wakeHub() *keysub.Hub {
	w := &c.waker
	w.once.Do(func() {
		w.hub = keysub.New(keysub.Config{
			Client:  c.conn.Client(),
			Deliver: c.wake,
			Refused: func(err error, first bool) {
				if first {
					c.log(slog.LevelWarn, "waiters learn of hand-offs by polling: the server refused SUBSCRIBE (SSUBSCRIBE with sharded pub/sub) on the hand-off channel "+
						"(grant the channel, see docs/permissions.md)", "err", err)
				}
			},
			Panicked: func(r any) { c.log(slog.LevelError, "hand-off subscription panicked", "panic", r) },
		})
	})
	return w.hub
}

// wakerAdd registers the waiter token on channel and returns the channel
// its wake-up arrives on, and one that is closed when the waiter may
// queue. Where the channel's mode is known (SSUBSCRIBE if mode is
// keysub.Sharded, SUBSCRIBE if keysub.Classic), it subscribes, and ready
// is closed once the server has confirmed the subscription (at once where
// the client cannot subscribe or the server refused it): the waiter joins
// the queue only then, or after one back-off step, as a hand-off announced
// before the subscription would reach nobody. Where mode is
// keysub.Unknown, it subscribes nothing, and ready is closed after the
// first re-probe step: the waiter's steps then ask again (wakerListen).
func (c *Client) wakerAdd(ctx context.Context, channel string, mode keysub.Mode, token string) (wake chan struct{}, ready <-chan struct{}) {
	ww := &wakeWaiter{wake: make(chan struct{}, 1)}
	if mode != keysub.Unknown {
		ww.sub, ready, _ = c.wakeHub().Add(ctx, channel, mode == keysub.Sharded)
		ww.listening = true
	} else {
		step := make(chan struct{})
		ww.step = time.AfterFunc(keysub.Reprobe(0), func() { close(step) })
		ww.tries = 1
		ready = step
	}
	w := &c.waker
	w.mu.Lock()
	if w.waiters == nil {
		w.waiters = map[string]*wakeWaiter{}
	}
	w.waiters[token] = ww
	w.mu.Unlock()
	return ww.wake, ready
}

// wakerListen reports whether a hand-off on channel to the waiter token
// reaches it, so that it may queue. That is so once it is subscribed in the
// mode the server has and the server has confirmed it (or the subscription
// cannot be made, or is refused: then its poll finds a hand-off, as where
// the client cannot subscribe), and stays so. Until then, each call asks the probe
// again (a waiter registered without knowing the mode), subscribes when it
// answers, and gives the confirmation one re-probe step, or until ctx
// ends; if the waiter cannot listen yet, it is woken after the next step
// (keysub.Reprobe), whatever its RetryStrategy, to call again.
func (c *Client) wakerListen(ctx context.Context, channel, token string) bool {
	w := &c.waker
	w.mu.Lock()
	ww := w.waiters[token]
	w.mu.Unlock()
	if ww == nil || ww.listening {
		return true
	}
	hub := c.wakeHub()
	if ww.sub == nil {
		mode := c.pubsubMode(ctx, channel)
		if mode == keysub.Unknown {
			c.wakeLater(ww)
			return false
		}
		ww.sub, _, _ = hub.Add(ctx, channel, mode == keysub.Sharded)
	}
	// Nothing to wait for where the subscription is gone or refused: the
	// waiter's poll finds a hand-off, as for a refusal at wakerAdd.
	if ready, _, _ := hub.State(ww.sub); ready != nil && hub.Refusal() == "" {
		t := time.NewTimer(keysub.Reprobe(ww.tries))
		defer t.Stop()
		select {
		case <-ready:
		case <-t.C:
			c.wakeLater(ww)
			return false
		case <-ctx.Done():
			c.wakeLater(ww)
			return false
		}
	}
	ww.listening = true
	if ww.step != nil {
		ww.step.Stop()
		ww.step = nil
	}
	// Not queued so far, the waiter was handed nothing: a wake-up pending
	// is a re-probe step's.
	select {
	case <-ww.wake:
	default:
	}
	return true
}

// wakeLater wakes the waiter ww after its next re-probe step. The timer's
// function only sends a wake-up that cannot block; wakerRemove stops it.
func (c *Client) wakeLater(ww *wakeWaiter) {
	if ww.step != nil {
		ww.step.Stop()
	}
	wake := ww.wake
	ww.step = time.AfterFunc(keysub.Reprobe(ww.tries), func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	ww.tries++
}

// wakerRemove unregisters the waiter token; channel is the one it was
// registered on.
func (c *Client) wakerRemove(channel, token string) {
	w := &c.waker
	w.mu.Lock()
	ww, ok := w.waiters[token]
	delete(w.waiters, token)
	w.mu.Unlock()
	if !ok {
		return
	}
	if ww.step != nil {
		ww.step.Stop()
	}
	if ww.sub != nil {
		c.wakeHub().Remove(ww.sub)
	}
}

// wake delivers a hand-off notice (the message is the waiter's token), or
// a semaphore's release notice (on the semaphore's channel, see
// semWakeLocked).
func (c *Client) wake(channel, token string) {
	w := &c.waker
	w.mu.Lock()
	if ws := w.sems[channel]; len(ws) > 0 {
		semWakeLocked(ws)
	} else if ww, ok := w.waiters[token]; ok {
		select {
		case ww.wake <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}
