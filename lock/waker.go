package lock

import (
	"context"
	"log/slog"
	"sync"

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
	mu      sync.Mutex            // guards waiters; held only for map updates and sends that cannot block
	waiters map[string]wakeWaiter // token -> its wake-up and subscription
}

type wakeWaiter struct {
	wake chan struct{}
	sub  *keysub.Sub
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

// wakerAdd registers the waiter token on channel (SSUBSCRIBE if sharded)
// and returns the channel its wake-up arrives on, and one that is closed
// once the server has confirmed the subscription (at once where the client
// cannot subscribe or the server refused it). The waiter joins the queue
// only then, or after one back-off step: a hand-off announced before the
// subscription would reach nobody.
func (c *Client) wakerAdd(ctx context.Context, channel string, sharded bool, token string) (wake chan struct{}, ready <-chan struct{}) {
	sub, ready, _ := c.wakeHub().Add(ctx, channel, sharded)
	wake = make(chan struct{}, 1)
	w := &c.waker
	w.mu.Lock()
	if w.waiters == nil {
		w.waiters = map[string]wakeWaiter{}
	}
	w.waiters[token] = wakeWaiter{wake: wake, sub: sub}
	w.mu.Unlock()
	return wake, ready
}

// wakerRemove unregisters the waiter token; channel is the one it was
// registered on.
func (c *Client) wakerRemove(channel, token string) {
	w := &c.waker
	w.mu.Lock()
	ww, ok := w.waiters[token]
	delete(w.waiters, token)
	w.mu.Unlock()
	if ok {
		c.wakeHub().Remove(ww.sub)
	}
}

// wake delivers a hand-off notice (the message is the waiter's token).
func (c *Client) wake(_, token string) {
	w := &c.waker
	w.mu.Lock()
	if ww, ok := w.waiters[token]; ok {
		select {
		case ww.wake <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}
