package lock

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// subscriber is what the waker needs of the client beyond RedisClient;
// every go-redis UniversalClient has it. A client without it leaves
// waiters to their poll.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Timings of the waker's subscription, as in package cache's announcer: a
// connection silent for wakerPing gets a PING, and one silent for another
// wakerPing is replaced.
const (
	wakerPing        = 3 * time.Second
	wakerLinger      = 10 * time.Second       // an idle subscription is closed after this
	wakerRetry       = 100 * time.Millisecond // after a broken connection, doubling while it fails
	wakerRetryMax    = 2 * time.Second
	wakerRetryDenied = 10 * time.Second // after a refused SUBSCRIBE
)

// waker delivers hand-off notices to the waiting Obtains of one Client over
// one pub/sub connection, subscribed to the channel of each key that has a
// waiter here. It is started by the first waiter and stops after
// wakerLinger without one. The zero value is ready to use.
type waker struct {
	mu       sync.Mutex               // guards the fields below; held only for map updates and sending (UN)SUBSCRIBE
	running  bool                     // a loop goroutine owns ps
	ps       *redis.PubSub            // the current subscription; nil between connections
	channels map[string]int           // channel -> waiters here
	ready    map[string]chan struct{} // channel -> closed once the server confirmed the subscription
	pending  map[string]int           // channel -> SUBSCRIBEs sent on ps and not yet confirmed
	waiters  map[string]chan struct{} // token -> wake-up
	denied   bool                     // the last SUBSCRIBE was refused (warned once until it works)
	idle     chan struct{}            // told when the last waiter leaves, to end the loop's pause
}

// closed is a channel that is closed.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// wakerAdd registers the waiter token on channel and returns the channel
// its wake-up arrives on, and one that is closed once the server has
// confirmed the subscription (at once where it refused one). The waiter
// joins the queue only then, or after one back-off step: a hand-off
// announced before the subscription would reach nobody. sub nil means the
// client cannot subscribe: only its poll will find the lock.
func (c *Client) wakerAdd(sub subscriber, channel, token string) (wake, ready chan struct{}) {
	w := &c.waker
	wake = make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters == nil {
		w.waiters, w.channels, w.ready, w.pending = map[string]chan struct{}{}, map[string]int{}, map[string]chan struct{}{}, map[string]int{}
		w.idle = make(chan struct{}, 1)
	}
	w.waiters[token] = wake
	w.channels[channel]++
	if sub == nil || w.denied {
		return wake, closed
	}
	ready = w.ready[channel]
	if ready == nil {
		ready = make(chan struct{})
		w.ready[channel] = ready
	}
	if !w.running {
		w.running = true
		go c.wakerLoop(sub)
	} else if w.ps != nil && w.channels[channel] == 1 {
		// Sent now, its reply read by the loop; an error fails the loop's
		// next read and the loop subscribes again to every channel. Only
		// the last confirmation counts: an older one may answer a
		// SUBSCRIBE that an UNSUBSCRIBE has undone since.
		w.pending[channel]++
		_ = w.ps.Subscribe(context.Background(), channel)
	}
	return wake, ready
}

// wakerRemove unregisters the waiter token on channel.
func (c *Client) wakerRemove(channel, token string) {
	w := &c.waker
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiters, token)
	if len(w.waiters) == 0 {
		select {
		case w.idle <- struct{}{}:
		default:
		}
	}
	if w.channels[channel]--; w.channels[channel] <= 0 {
		delete(w.channels, channel)
		delete(w.ready, channel) // pending stays: confirmations of SUBSCRIBEs sent may still come
		if w.ps != nil {
			_ = w.ps.Unsubscribe(context.Background(), channel)
		}
	}
}

// wakerLoop subscribes and delivers notices until no waiter has been here
// for wakerLinger, subscribing again after a broken connection and, every
// wakerRetryDenied, after a refusal.
func (c *Client) wakerLoop(sub subscriber) {
	w := &c.waker
	defer func() {
		if r := recover(); r != nil {
			c.log(slog.LevelError, "hand-off subscription panicked", "panic", r)
			w.mu.Lock()
			w.running, w.ps = false, nil
			w.mu.Unlock()
		}
	}()
	backoff := wakerRetry
	for {
		ctx := context.Background()
		ps := sub.Subscribe(ctx)
		w.mu.Lock()
		w.ps = ps
		chans := make([]string, 0, len(w.channels))
		clear(w.pending)
		for ch := range w.channels {
			chans = append(chans, ch)
			w.pending[ch] = 1
		}
		var err error
		if len(chans) > 0 {
			err = ps.Subscribe(ctx, chans...)
		}
		w.mu.Unlock()

		confirmed, err := c.wakerSession(ps, err)

		w.mu.Lock()
		w.ps = nil
		// Nobody waits: stop, whether the connection idled or broke (a
		// closed client ends here too); the next waiter starts a new one.
		stop := len(w.waiters) == 0 || errors.Is(err, redis.ErrClosed)
		if stop {
			w.running = false
		}
		w.mu.Unlock()
		_ = ps.Close()
		if stop {
			return
		}
		if confirmed {
			backoff = wakerRetry
		}
		wait := backoff
		backoff = min(2*backoff, wakerRetryMax)
		if redisx.IsNoPerm(err) {
			w.mu.Lock()
			first := !w.denied
			w.denied = true
			w.mu.Unlock()
			if first {
				c.log(slog.LevelWarn, "waiters learn of hand-offs by polling: the server refused SUBSCRIBE on the hand-off channel "+
					"(grant the channel, see the README's Permissions section)", "err", err)
			}
			wait = wakerRetryDenied
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-w.idle:
			t.Stop()
		}
		w.mu.Lock()
		stop = len(w.waiters) == 0
		if stop {
			w.running = false
		}
		w.mu.Unlock()
		if stop {
			return
		}
	}
}

// wakerSession reads ps until its connection fails (err) or it has been
// idle, with no waiter here, for wakerLinger (err nil).
func (c *Client) wakerSession(ps *redis.PubSub, subErr error) (confirmed bool, err error) {
	if subErr != nil {
		return false, subErr
	}
	w := &c.waker
	pinged := false
	var idleSince time.Time
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), wakerPing)
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout() && !pinged:
			w.mu.Lock()
			nobody := len(w.waiters) == 0
			w.mu.Unlock()
			if nobody {
				if idleSince.IsZero() {
					idleSince = time.Now()
				} else if time.Since(idleSince) >= wakerLinger {
					return confirmed, nil
				}
			} else {
				idleSince = time.Time{}
			}
			pinged = true
			if err := ps.Ping(context.Background()); err != nil {
				return confirmed, err
			}
			continue
		case err != nil:
			return confirmed, err
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				confirmed = true
				w.mu.Lock()
				w.denied = false
				w.pending[m.Channel]--
				if w.pending[m.Channel] <= 0 {
					delete(w.pending, m.Channel)
				}
				if r := w.ready[m.Channel]; r != nil && r != closed && w.pending[m.Channel] == 0 {
					select {
					case <-r:
					default:
						close(r)
					}
				}
				w.mu.Unlock()
			}
		case *redis.Message:
			w.mu.Lock()
			if ch := w.waiters[m.Payload]; ch != nil {
				select {
				case ch <- struct{}{}:
				default:
				}
			}
			w.mu.Unlock()
		case *redis.Pong:
		}
	}
}
