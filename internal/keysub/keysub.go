// Package keysub keeps pub/sub subscriptions to per-key channels for as
// long as somebody in the process wants them, shared by package lock (the
// hand-off wake-ups) and package cache (the announcements of rebuilds,
// Sets and Deletes).
//
// A Hub holds one pub/sub connection per subscription target: the client
// itself, or, with sharded pub/sub on a Redis Cluster, each master that
// owns a wanted channel's slot (SSUBSCRIBE must go to the slot's owner).
// Channels are reference-counted: the first Add subscribes, the last
// Remove unsubscribes, at once or after Config.Linger. A connection without
// channels is closed after Config.Idle. The Hub tells the caller when the
// server has confirmed a subscription (a message published after that
// reaches it), pings a silent connection, replaces a broken one with back-off
// and reports refusals (ACL) once per change.
package keysub

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// subscriber and shardSubscriber are what the Hub needs of a client; every
// go-redis UniversalClient has both. A client without them leaves the
// Hub's users to their poll.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

type shardSubscriber interface {
	SSubscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// Timings of a Hub's connections: a connection silent for Ping gets a PING,
// and one silent for another Ping is replaced.
const (
	Ping        = 3 * time.Second
	Idle        = 10 * time.Second       // default Config.Idle
	Retry       = 100 * time.Millisecond // after a broken connection, doubling while it fails
	RetryMax    = 2 * time.Second
	RetryDenied = 10 * time.Second // after a refused (S)SUBSCRIBE
)

// Config configures a Hub. Every function is optional.
type Config struct {
	// Client is the client whose connections the Hub subscribes on.
	Client any

	// Deliver is called with each message, on the connection's goroutine,
	// with no lock of the Hub held. It must not block for long.
	Deliver func(channel, payload string)

	// Refused is called when the server refuses a (S)SUBSCRIBE (ACL), with
	// first true for the first refusal since one last worked.
	Refused func(err error, first bool)

	// Restored is called when a subscription is confirmed after a refusal.
	Restored func()

	// Panicked is called when a connection's loop panicked (it ends; the
	// next Add starts another).
	Panicked func(r any)

	// Linger is how long a channel that nobody wants any more stays
	// subscribed, so that a key waited for again soon is not subscribed
	// anew. Default: 0, unsubscribed at once.
	Linger time.Duration

	// Idle is how long a connection without channels stays open.
	// Default: Idle (10s).
	Idle time.Duration
}

// Hub keeps the subscriptions of one client. It is safe for concurrent
// use. Use New to create a Hub.
type Hub struct {
	cfg Config

	mu       sync.Mutex          // guards the fields below and those of every session and Sub; never held while calling out of the Hub
	subs     map[string]*Sub     // channel -> its current subscription
	sessions map[string]*session // target name -> its connection
	denied   bool                // the last (S)SUBSCRIBE was refused; cleared by a confirmation
	refusal  string              // the last refusal's text, "" once one worked since
	closed   bool
	wg       sync.WaitGroup // the sessions' loops

	delivered, subscribes uint64 // counts, for tests (Counts)
}

// Sub is one channel's subscription, shared by everybody in the process
// who wants that channel.
type Sub struct {
	channel string
	s       *session // nil when not subscribed anywhere (the client cannot)
	refs    int      // Adds not yet Removed
	ready   chan struct{}
	at      time.Time // when ready was closed by a confirmation; zero while unconfirmed
	pending int       // (S)SUBSCRIBEs sent on s.ps and not yet confirmed
	linger  *time.Timer
	gen     uint64 // counts Adds, so that a linger timer knows it is stale
	gone    bool   // no longer the Hub's subscription of the channel
}

// target says where a channel is subscribed: name identifies the
// connection ("" for the client itself, a master's address on a cluster
// with sharded pub/sub), open opens it.
type target struct {
	name    string
	open    func(ctx context.Context, channels ...string) *redis.PubSub
	sharded bool // SSUBSCRIBE rather than SUBSCRIBE
}

// session is one pub/sub connection of the Hub and its loop.
type session struct {
	t        target
	running  bool            // a loop goroutine owns ps
	ps       *redis.PubSub   // the current connection; nil between connections
	subs     map[string]*Sub // channel -> subscription on this connection
	unsubs   map[string]int  // channel -> (S)UNSUBSCRIBEs sent and not yet confirmed
	idle     chan struct{}   // told when the last channel goes, to end the loop's pause
	stopping bool            // Close was called
}

// closed is a channel that is closed: ready at once. Never written.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// New returns a Hub for cfg. It makes no server call.
func New(cfg Config) *Hub {
	if cfg.Idle <= 0 {
		cfg.Idle = Idle
	}
	return &Hub{cfg: cfg, subs: map[string]*Sub{}, sessions: map[string]*session{}}
}

// targetFor returns where channel is to be subscribed; ok is false when
// the client cannot subscribe.
func (h *Hub) targetFor(ctx context.Context, channel string, sharded bool) (target, bool) {
	rc := h.cfg.Client
	if r, ok := rc.(*redis.Ring); ok {
		// A ring subscribes a connection on the shard of its first
		// channel: one connection per channel.
		if sharded {
			return target{name: "ring:" + channel, open: r.SSubscribe, sharded: true}, true
		}
		return target{name: "ring:" + channel, open: r.Subscribe}, true
	}
	if !sharded {
		sub, ok := rc.(subscriber)
		if !ok {
			return target{}, false
		}
		return target{open: sub.Subscribe}, true
	}
	if cc, ok := rc.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return target{}, false
		}
		return target{name: node.Options().Addr, open: node.SSubscribe, sharded: true}, true
	}
	sub, ok := rc.(shardSubscriber)
	if !ok {
		return target{}, false
	}
	return target{open: sub.SSubscribe, sharded: true}, true
}

// Add subscribes to channel (SSUBSCRIBE if sharded), or joins its
// subscription, and returns it with a channel that is closed once the
// server has confirmed the subscription: a message published after that
// reaches this process (unless the connection fails). ready is closed at
// once where the Hub cannot subscribe (the client cannot, the Hub is
// closed, or the server refused the last subscription): then only a poll
// finds what was published, and live is false. Every Add needs one
// Remove.
func (h *Hub) Add(ctx context.Context, channel string, sharded bool) (sub *Sub, ready <-chan struct{}, live bool) {
	h.mu.Lock()
	sub = h.subs[channel]
	h.mu.Unlock()
	var (
		t  target
		ok bool
	)
	if sub == nil {
		// Outside mu: on a cluster this may ask the client for the slots.
		t, ok = h.targetFor(ctx, channel, sharded)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if sub = h.subs[channel]; sub == nil {
		sub = &Sub{channel: channel, ready: make(chan struct{})}
		if !ok || h.closed {
			sub.ready = closed
		} else {
			s := h.sessions[t.name]
			if s == nil {
				s = &session{t: t, subs: map[string]*Sub{}, unsubs: map[string]int{}, idle: make(chan struct{}, 1)}
				h.sessions[t.name] = s
			}
			sub.s = s
			s.subs[channel] = sub
			if !s.running {
				s.running = true
				h.wg.Add(1)
				go h.loop(s)
			} else if s.ps != nil {
				// Sent now, its reply read by the loop; an error fails the
				// loop's next read and the loop subscribes again to every
				// channel. Only the last confirmation counts: an older one
				// may answer a SUBSCRIBE that an UNSUBSCRIBE has undone.
				sub.pending++
				h.subscribes++
				s.subscribe(channel)
			}
		}
		h.subs[channel] = sub
	}
	sub.refs++
	sub.gen++
	if sub.linger != nil {
		sub.linger.Stop()
		sub.linger = nil
	}
	if h.denied || sub.ready == closed {
		return sub, closed, false
	}
	return sub, sub.ready, true
}

// State returns sub's current confirmation signal (a new one after its
// connection failed) and when the confirmation arrived, zero if it has
// not; ready is nil when sub no longer subscribes anything (its slot moved,
// its connection ended for good): only a poll helps then.
func (h *Hub) State(sub *Sub) (ready <-chan struct{}, at time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sub.gone || sub.s == nil {
		return nil, time.Time{}
	}
	return sub.ready, sub.at
}

// Remove undoes one Add of sub.
func (h *Hub) Remove(sub *Sub) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sub.refs--; sub.refs > 0 || sub.gone {
		return
	}
	if h.cfg.Linger > 0 && !h.closed && sub.s != nil {
		gen := sub.gen
		sub.linger = time.AfterFunc(h.cfg.Linger, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if sub.refs == 0 && sub.gen == gen && !sub.gone {
				h.drop(sub)
			}
		})
		return
	}
	h.drop(sub)
}

// drop unsubscribes sub, under mu.
func (h *Hub) drop(sub *Sub) {
	sub.gone = true
	if sub.linger != nil {
		sub.linger.Stop()
		sub.linger = nil
	}
	if h.subs[sub.channel] == sub {
		delete(h.subs, sub.channel)
	}
	s := sub.s
	if s == nil || s.subs[sub.channel] != sub {
		return
	}
	delete(s.subs, sub.channel)
	if s.ps != nil {
		s.unsubs[sub.channel]++
		s.unsubscribe(sub.channel)
	}
	if len(s.subs) == 0 {
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
}

// Refusal returns the server's last refusal of a subscription, "" if
// none stands.
func (h *Hub) Refusal() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refusal
}

// Counts returns how many messages the Hub has delivered and how many
// (S)SUBSCRIBEs of single channels it sent on open connections, for tests.
func (h *Hub) Counts() (delivered, subscribes uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.delivered, h.subscribes
}

// Close ends every subscription and waits for the connections' loops. Adds
// after Close subscribe nothing.
func (h *Hub) Close() {
	h.mu.Lock()
	h.closed = true
	for _, sub := range h.subs {
		if sub.linger != nil {
			sub.linger.Stop()
			sub.linger = nil
		}
		sub.gone = true
	}
	clear(h.subs)
	for _, s := range h.sessions {
		s.stopping = true
		clear(s.subs)
		if s.ps != nil {
			_ = s.ps.Close() // ends a receive in progress
		}
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
	h.wg.Wait()
}

func (s *session) subscribe(ch string) {
	if s.t.sharded {
		_ = s.ps.SSubscribe(context.Background(), ch)
	} else {
		_ = s.ps.Subscribe(context.Background(), ch)
	}
}

func (s *session) unsubscribe(ch string) {
	if s.t.sharded {
		_ = s.ps.SUnsubscribe(context.Background(), ch)
	} else {
		_ = s.ps.Unsubscribe(context.Background(), ch)
	}
}

// loop subscribes s and delivers messages until it has had no channel for
// Config.Idle, subscribing again after a broken connection and, every
// RetryDenied, after a refusal.
func (h *Hub) loop(s *session) {
	defer h.wg.Done()
	// stop ends the loop if s has no channel left, under mu.
	stop := func() bool {
		if len(s.subs) > 0 && !s.stopping {
			return false
		}
		s.running, s.ps = false, nil
		if h.sessions[s.t.name] == s {
			delete(h.sessions, s.t.name)
		}
		return true
	}
	defer func() {
		if r := recover(); r != nil {
			h.mu.Lock()
			s.ps = nil
			h.endLocked(s)
			h.mu.Unlock()
			if h.cfg.Panicked != nil {
				h.cfg.Panicked(r)
			}
		}
	}()
	backoff := Retry
	for {
		ctx := context.Background()
		h.mu.Lock()
		if stop() {
			h.mu.Unlock()
			return
		}
		chans := make([]string, 0, len(s.subs))
		clear(s.unsubs)
		for ch, sub := range s.subs {
			chans = append(chans, ch)
			sub.pending = 1
			select {
			case <-sub.ready:
				// Confirmed on a connection that is gone: whoever Adds
				// from now on waits for this one's confirmation.
				sub.ready, sub.at = make(chan struct{}), time.Time{}
			default:
			}
		}
		// Opened with its channels: a cluster client's sharded
		// subscription goes to the node of the first one.
		ps := s.t.open(ctx, chans...)
		s.ps = ps
		h.mu.Unlock()

		confirmed, err := h.session(s, ps)

		h.mu.Lock()
		s.ps = nil
		for _, sub := range s.subs {
			select {
			case <-sub.ready:
				// Confirmed on the connection that is gone: messages
				// are lost until the next one is confirmed.
				sub.ready, sub.at = make(chan struct{}), time.Time{}
			default:
			}
		}
		// No channel left: stop, whether the connection idled or broke (a
		// closed client ends here too); the next Add starts a new loop.
		done := stop() || errors.Is(err, redis.ErrClosed)
		if done {
			h.endLocked(s)
		}
		h.mu.Unlock()
		_ = ps.Close()
		if done {
			return
		}
		if err == nil {
			continue // idled out, but a channel came meanwhile: subscribe at once
		}
		if confirmed {
			backoff = Retry
		}
		wait := backoff
		backoff = min(2*backoff, RetryMax)
		if redisx.IsNoPerm(err) {
			h.mu.Lock()
			first := !h.denied
			h.denied, h.refusal = true, err.Error()
			h.mu.Unlock()
			if h.cfg.Refused != nil {
				h.cfg.Refused(err, first)
			}
			wait = RetryDenied
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.idle:
			t.Stop()
		}
	}
}

// session reads ps until its connection fails (err) or it has been idle,
// with no channel, for Config.Idle (err nil).
func (h *Hub) session(s *session, ps *redis.PubSub) (confirmed bool, err error) {
	pinged := false
	var idleSince time.Time
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), Ping)
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout() && !pinged:
			h.mu.Lock()
			nobody, stopping := len(s.subs) == 0, s.stopping
			h.mu.Unlock()
			if stopping {
				return confirmed, redis.ErrClosed
			}
			if nobody {
				if idleSince.IsZero() {
					idleSince = time.Now()
				} else if time.Since(idleSince) >= h.cfg.Idle {
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
			switch m.Kind {
			case "subscribe", "ssubscribe":
				confirmed = true
				h.mu.Lock()
				restored := h.denied
				h.denied, h.refusal = false, ""
				if sub := s.subs[m.Channel]; sub != nil {
					if sub.pending--; sub.pending <= 0 {
						sub.pending = 0
						select {
						case <-sub.ready:
						default:
							close(sub.ready)
							sub.at = time.Now()
						}
					}
				}
				h.mu.Unlock()
				if restored && h.cfg.Restored != nil {
					h.cfg.Restored()
				}
			case "unsubscribe", "sunsubscribe":
				h.mu.Lock()
				if s.unsubs[m.Channel] > 0 {
					s.unsubs[m.Channel]--
				} else if sub := s.subs[m.Channel]; sub != nil && sub.pending == 0 {
					// Not asked for: the slot moved to another master.
					// Those waiting now poll; the next Add subscribes
					// where the slot is now.
					sub.gone = true
					delete(s.subs, m.Channel)
					if h.subs[m.Channel] == sub {
						delete(h.subs, m.Channel)
					}
				}
				h.mu.Unlock()
			}
		case *redis.Message:
			h.mu.Lock()
			h.delivered++
			h.mu.Unlock()
			if h.cfg.Deliver != nil {
				h.cfg.Deliver(m.Channel, m.Payload)
			}
		case *redis.Pong:
		}
	}
}

// endLocked ends session s: its loop is no longer running, the hub
// forgets it, and its subscriptions are gone (their waiters are left to
// their poll; the next Add subscribes anew). h.mu must be held.
func (h *Hub) endLocked(s *session) {
	s.running = false
	if h.sessions[s.t.name] == s {
		delete(h.sessions, s.t.name)
	}
	for ch, sub := range s.subs {
		sub.gone = true
		if h.subs[ch] == sub {
			delete(h.subs, ch)
		}
	}
}
