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

// subscriber and shardSubscriber are what the waker needs of the client
// beyond RedisClient; every go-redis UniversalClient has both. A client
// without them leaves waiters to their poll.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

type shardSubscriber interface {
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Timings of the waker's subscriptions, as in package cache's announcer: a
// connection silent for wakerPing gets a PING, and one silent for another
// wakerPing is replaced.
const (
	wakerPing        = 3 * time.Second
	wakerLinger      = 10 * time.Second       // an idle subscription is closed after this
	wakerRetry       = 100 * time.Millisecond // after a broken connection, doubling while it fails
	wakerRetryMax    = 2 * time.Second
	wakerRetryDenied = 10 * time.Second // after a refused SUBSCRIBE
)

// waker delivers hand-off notices to the waiting Obtains of one Client. It
// keeps one pub/sub connection, subscribed to the channel of each key that
// has a waiter here, per subscription target: the client itself, or, with
// sharded pub/sub on a Redis Cluster, each master that owns a waited key's
// slot. A connection is opened by the first waiter and closed after
// wakerLinger without one. The zero value is ready to use.
type waker struct {
	mu       sync.Mutex               // guards the fields below and the sessions' fields; held only for map updates and sending (UN)SUBSCRIBE
	waiters  map[string]chan struct{} // token -> wake-up
	ready    map[string]chan struct{} // channel -> closed once the server confirmed the subscription
	sessions map[string]*wakeSession  // target -> its subscription
	of       map[string]*wakeSession  // channel -> the session subscribed to it
	denied   bool                     // the last SUBSCRIBE was refused (warned once until it works)
}

// wakeTarget says where a channel is subscribed: name identifies the
// connection ("" for the client itself, a master's address on a cluster
// with sharded pub/sub), open opens it.
type wakeTarget struct {
	name    string
	open    func(ctx context.Context, channels ...string) *redis.PubSub
	sharded bool // SSUBSCRIBE rather than SUBSCRIBE
}

// wakeSession is one pub/sub connection of the waker and its loop.
type wakeSession struct {
	t        wakeTarget
	running  bool           // a loop goroutine owns ps
	ps       *redis.PubSub  // the current connection; nil between connections
	channels map[string]int // channel -> waiters here
	pending  map[string]int // channel -> SUBSCRIBEs sent on ps and not yet confirmed
	idle     chan struct{}  // told when the last channel goes, to end the loop's pause
}

func (s *wakeSession) subscribe(ch string) {
	if s.t.sharded {
		_ = s.ps.SSubscribe(context.Background(), ch)
	} else {
		_ = s.ps.Subscribe(context.Background(), ch)
	}
}

func (s *wakeSession) unsubscribe(ch string) {
	if s.t.sharded {
		_ = s.ps.SUnsubscribe(context.Background(), ch)
	} else {
		_ = s.ps.Unsubscribe(context.Background(), ch)
	}
}

// closed is a channel that is closed.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// wakeTargetFor returns where channel is to be subscribed; ok is false
// when the client cannot subscribe.
func (c *Client) wakeTargetFor(ctx context.Context, channel string, sharded bool) (wakeTarget, bool) {
	rc := c.conn.Client()
	if !sharded {
		sub, ok := rc.(subscriber)
		if !ok {
			return wakeTarget{}, false
		}
		return wakeTarget{open: sub.Subscribe}, true
	}
	if cc, ok := rc.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return wakeTarget{}, false
		}
		return wakeTarget{name: node.Options().Addr, open: node.SSubscribe, sharded: true}, true
	}
	sub, ok := rc.(shardSubscriber)
	if !ok {
		return wakeTarget{}, false
	}
	return wakeTarget{open: sub.SSubscribe, sharded: true}, true
}

// wakerAdd registers the waiter token on channel, subscribed at t (ok
// false: nowhere, only its poll will find the lock), and returns the
// channel its wake-up arrives on, and one that is closed once the server
// has confirmed the subscription (at once where it refused one). The
// waiter joins the queue only then, or after one back-off step: a hand-off
// announced before the subscription would reach nobody.
func (c *Client) wakerAdd(t wakeTarget, ok bool, channel, token string) (wake, ready chan struct{}) {
	w := &c.waker
	wake = make(chan struct{}, 1)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.waiters == nil {
		w.waiters, w.ready = map[string]chan struct{}{}, map[string]chan struct{}{}
		w.sessions, w.of = map[string]*wakeSession{}, map[string]*wakeSession{}
	}
	w.waiters[token] = wake
	if !ok || w.denied {
		return wake, closed
	}
	s := w.of[channel]
	if s == nil {
		if s = w.sessions[t.name]; s == nil {
			s = &wakeSession{t: t, channels: map[string]int{}, pending: map[string]int{}, idle: make(chan struct{}, 1)}
			w.sessions[t.name] = s
		}
		w.of[channel] = s
	}
	s.channels[channel]++
	ready = w.ready[channel]
	if ready == nil {
		ready = make(chan struct{})
		w.ready[channel] = ready
	}
	if !s.running {
		s.running = true
		go c.wakerLoop(s)
	} else if s.ps != nil && s.channels[channel] == 1 {
		// Sent now, its reply read by the loop; an error fails the loop's
		// next read and the loop subscribes again to every channel. Only
		// the last confirmation counts: an older one may answer a
		// SUBSCRIBE that an UNSUBSCRIBE has undone since.
		s.pending[channel]++
		s.subscribe(channel)
	}
	return wake, ready
}

// wakerRemove unregisters the waiter token on channel.
func (c *Client) wakerRemove(channel, token string) {
	w := &c.waker
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.waiters, token)
	s := w.of[channel]
	if s == nil {
		return
	}
	if s.channels[channel]--; s.channels[channel] > 0 {
		return
	}
	delete(s.channels, channel)
	delete(w.of, channel)
	delete(w.ready, channel) // s.pending stays: confirmations of SUBSCRIBEs sent may still come
	if s.ps != nil {
		s.unsubscribe(channel)
	}
	if len(s.channels) == 0 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// wakerLoop subscribes s and delivers notices until it has had no channel
// for wakerLinger, subscribing again after a broken connection and, every
// wakerRetryDenied, after a refusal.
func (c *Client) wakerLoop(s *wakeSession) {
	w := &c.waker
	// stop ends the loop if s has no channel left, under w.mu.
	stop := func() bool {
		if len(s.channels) > 0 {
			return false
		}
		s.running, s.ps = false, nil
		if w.sessions[s.t.name] == s {
			delete(w.sessions, s.t.name)
		}
		return true
	}
	defer func() {
		if r := recover(); r != nil {
			c.log(slog.LevelError, "hand-off subscription panicked", "panic", r)
			w.mu.Lock()
			s.running, s.ps = false, nil
			if w.sessions[s.t.name] == s {
				delete(w.sessions, s.t.name)
			}
			for ch, o := range w.of {
				if o == s {
					delete(w.of, ch)
				}
			}
			w.mu.Unlock()
		}
	}()
	backoff := wakerRetry
	for {
		ctx := context.Background()
		w.mu.Lock()
		chans := make([]string, 0, len(s.channels))
		clear(s.pending)
		for ch := range s.channels {
			chans = append(chans, ch)
			s.pending[ch] = 1
		}
		// Opened with its channels: a cluster client's sharded subscription
		// goes to the node of the first one.
		ps := s.t.open(ctx, chans...)
		s.ps = ps
		w.mu.Unlock()

		confirmed, err := c.wakerSession(s, ps)

		w.mu.Lock()
		s.ps = nil
		// No channel left: stop, whether the connection idled or broke (a
		// closed client ends here too); the next waiter starts a new loop.
		done := stop() || errors.Is(err, redis.ErrClosed)
		if done {
			s.running = false
		}
		w.mu.Unlock()
		_ = ps.Close()
		if done {
			return
		}
		if err == nil {
			continue // idled out, but a waiter came meanwhile: subscribe at once
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
				c.log(slog.LevelWarn, "waiters learn of hand-offs by polling: the server refused SUBSCRIBE (SSUBSCRIBE with sharded pub/sub) on the hand-off channel "+
					"(grant the channel, see the README's Permissions section)", "err", err)
			}
			wait = wakerRetryDenied
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.idle:
			t.Stop()
		}
		w.mu.Lock()
		done = stop()
		w.mu.Unlock()
		if done {
			return
		}
	}
}

// wakerSession reads ps until its connection fails (err) or it has been
// idle, with no channel, for wakerLinger (err nil).
func (c *Client) wakerSession(s *wakeSession, ps *redis.PubSub) (confirmed bool, err error) {
	w := &c.waker
	pinged := false
	var idleSince time.Time
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), wakerPing)
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout() && !pinged:
			w.mu.Lock()
			nobody := len(s.channels) == 0
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
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				confirmed = true
				w.mu.Lock()
				w.denied = false
				s.pending[m.Channel]--
				if s.pending[m.Channel] <= 0 {
					delete(s.pending, m.Channel)
				}
				if r := w.ready[m.Channel]; r != nil && r != closed && s.pending[m.Channel] == 0 && w.of[m.Channel] == s {
					select {
					case <-r:
					default:
						close(r)
					}
				}
				w.mu.Unlock()
			}
			// A "sunsubscribe" the client did not ask for says the slot
			// moved to another master: the channel's waiters poll, and
			// the next waiter on it subscribes where the slot is now.
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
