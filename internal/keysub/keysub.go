// Package keysub keeps pub/sub subscriptions to per-key channels for as
// long as somebody in the process wants them, shared by package lock (the
// hand-off wake-ups) and package cache (the announcements of rebuilds,
// Sets and Deletes).
//
// A Hub holds one pub/sub connection per subscription target: the client
// itself, or, with sharded pub/sub on a Redis Cluster, each master that
// owns a wanted channel's slot (SSUBSCRIBE must go to the slot's owner);
// classic and sharded subscriptions never share a connection. A channel
// wanted in both modes has a subscription in each: the mode is part of
// what is subscribed, never taken from whoever subscribed first (Probe
// tells callers which mode the server has, or that it has not said yet).
// Subscriptions are reference-counted: the first Add subscribes, the last
// Remove unsubscribes, at once or after Config.Linger. A connection
// without channels is closed after Config.Idle. The Hub tells the caller when the
// server has confirmed a subscription (a message published after that
// reaches it), pings a silent connection, replaces a broken one with back-off
// and reports refusals (ACL) once per change.
package keysub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strconv"
	"strings"
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
	subs     map[subKey]*Sub     // channel and mode -> its current subscription
	sessions map[string]*session // target name -> its connection
	denied   bool                // the last (S)SUBSCRIBE was refused; cleared by a confirmation
	refusal  string              // the last refusal's text, "" once one worked since
	closed   bool
	wg       sync.WaitGroup // the sessions' loops

	delivered, subscribes uint64 // counts, for tests (Counts)
	pings                 uint64 // Syncs so far: each PING's payload
	id                    string // random: names this Hub's Sync markers
}

// Sub is one channel's subscription in one mode, shared by everybody in
// the process who wants that channel in that mode.
type Sub struct {
	channel string
	sharded bool     // SSUBSCRIBE rather than SUBSCRIBE; fixed at the first Add
	s       *session // nil when not subscribed anywhere (the client cannot)
	refs    int      // Adds not yet Removed
	ready   chan struct{}
	at      time.Time     // when ready was closed by a confirmation; zero while unconfirmed
	lost    chan struct{} // closed when a confirmation that ready announced ends (see Lost)
	pending int           // (S)SUBSCRIBEs sent on s.ps and not yet confirmed
	linger  *time.Timer
	gen     uint64 // counts Adds, so that a linger timer knows it is stale
	gone    bool   // no longer the Hub's subscription of the channel
}

// subKey names a Sub in Hub.subs: a channel in one mode.
type subKey struct {
	channel string
	sharded bool
}

func (sub *Sub) key() subKey { return subKey{sub.channel, sub.sharded} }

// target says where a channel is subscribed: name identifies the
// connection ("" for the client itself, "s:" for its sharded connection,
// "s:" and a master's address on a cluster with sharded pub/sub), open
// opens it.
type target struct {
	name    string
	open    func(ctx context.Context, channels ...string) *redis.PubSub
	sharded bool // SSUBSCRIBE rather than SUBSCRIBE
}

// session is one pub/sub connection of the Hub and its loop.
type session struct {
	t        target
	running  bool                     // a loop goroutine owns ps
	ps       *redis.PubSub            // the current connection; nil between connections and while one is opened (connect)
	subs     map[string]*Sub          // channel -> subscription on this connection
	unsubs   map[string]int           // channel -> (S)UNSUBSCRIBEs sent and not yet confirmed
	idle     chan struct{}            // told when the last channel goes, to end the loop's pause
	queue    []command                // decided, not yet sent; in order
	sending  bool                     // a send goroutine drains queue
	stopping bool                     // Close was called
	pongs    map[string]chan struct{} // a Sync's PING payload -> closed by its PONG
}

// closed is a channel that is closed: ready at once. Never written.
var closed = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// New returns a Hub for cfg. It makes no server call.
func New(cfg Config) *Hub {
	if cfg.Idle <= 0 {
		cfg.Idle = Idle
	}
	var id [8]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read never fails
	return &Hub{cfg: cfg, subs: map[subKey]*Sub{}, sessions: map[string]*session{}, id: hex.EncodeToString(id[:])}
}

// targetFor returns where channel is to be subscribed; ok is false when
// the client cannot subscribe. Sharded targets' names start with "s:",
// so that a classic and a sharded connection never share a session.
func (h *Hub) targetFor(ctx context.Context, channel string, sharded bool) (target, bool) {
	rc := h.cfg.Client
	if r, ok := rc.(*redis.Ring); ok {
		// A ring subscribes a connection on the shard of its first
		// channel: one connection per channel.
		if sharded {
			return target{name: "s:ring:" + channel, open: r.SSubscribe, sharded: true}, true
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
		return target{name: "s:" + node.Options().Addr, open: node.SSubscribe, sharded: true}, true
	}
	sub, ok := rc.(shardSubscriber)
	if !ok {
		return target{}, false
	}
	return target{name: "s:", open: sub.SSubscribe, sharded: true}, true
}

// Add subscribes to channel (SSUBSCRIBE if sharded, SUBSCRIBE otherwise),
// or joins its subscription in that mode, and returns it with a channel
// that is closed once the server has confirmed the subscription: a
// message published after that in that mode reaches this process (unless
// the connection fails). A subscription of the channel in the other mode
// is not joined: the two are apart, each with its own connection (and
// both deliver). ready is closed at once where the Hub cannot subscribe
// (the client cannot, the Hub is closed, or the server refused the last
// subscription): then only a poll finds what was published, and live is
// false. Every Add needs one Remove.
//
// NOTE: sharded must be what the server has (Probe.Mode answered Sharded
// or Classic), never a guess: a subscription in the wrong mode hears
// nothing, for as long as it is wanted and lingers.
func (h *Hub) Add(ctx context.Context, channel string, sharded bool) (sub *Sub, ready <-chan struct{}, live bool) {
	k := subKey{channel, sharded}
	h.mu.Lock()
	sub = h.subs[k]
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
	if sub = h.subs[k]; sub == nil {
		sub = &Sub{channel: channel, sharded: sharded, ready: make(chan struct{}), lost: make(chan struct{})}
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
				// Sent by send, its reply read by the loop; an error fails
				// the loop's next read and the loop subscribes again to
				// every channel. Only the last confirmation counts: an
				// older one may answer a SUBSCRIBE that an UNSUBSCRIBE has
				// undone.
				sub.pending++
				h.subscribes++
				h.enqueueLocked(s, channel, false)
			}
		}
		h.subs[k] = sub
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
// connection failed), when the confirmation arrived (zero if it has
// not), and lost, closed when that confirmation ends: its connection
// failed (messages published until the next confirmation reach nobody
// here), or sub no longer subscribes anything. Whoever counted on the
// confirmation (at before its read) and waits for a message must read
// again when lost closes, and wait for the next confirmation: a message
// published meanwhile is lost, not late. ready is nil when sub no longer
// subscribes anything (its slot moved, its connection ended for good):
// only a poll helps then.
func (h *Hub) State(sub *Sub) (ready <-chan struct{}, at time.Time, lost <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if sub.gone || sub.s == nil {
		return nil, time.Time{}, sub.lost
	}
	return sub.ready, sub.at, sub.lost
}

// loseLocked ends sub's current confirmation: Lost's channel closes, and
// a new one stands for the next confirmation, unless sub is gone. h.mu
// must be held.
func (h *Hub) loseLocked(sub *Sub) {
	select {
	case <-sub.lost:
	default:
		close(sub.lost)
	}
	if !sub.gone {
		sub.lost = make(chan struct{})
	}
}

// Sync waits until the messages published on sub's channel before Sync
// was called have been delivered, and reports whether it knows they have:
// it sends a PING on sub's connection, which the server answers after
// every message it sent there before, and publishes a marker on sub's
// channel (in sub's mode), which reaches sub after every message
// published there before; it waits for both until ctx ends. The marker
// is the barrier on a server that answers a PING ahead of messages it has
// queued (miniredis does); the PING stands alone where the marker could
// not be published. Other subscribers of the channel drop the marker (any
// Hub does, see syncPrefix). It is false at once when sub is not
// confirmed on a connection.
//
// A message can be published, and then the change it announces made,
// before a read on another connection finds that change: the read's
// reply may then come before the message. Sync after such a read is a
// barrier: what was published before the change is delivered when it
// returns true.
func (h *Hub) Sync(ctx context.Context, sub *Sub) bool {
	h.mu.Lock()
	s := sub.s
	if sub.gone || s == nil || s.ps == nil || sub.at.IsZero() {
		h.mu.Unlock()
		return false
	}
	ps := s.ps
	h.pings++
	id := "keysub:" + strconv.FormatUint(h.pings, 10)
	marker := syncPrefix + h.id + ":" + strconv.FormatUint(h.pings, 10)
	pong, marked := make(chan struct{}), make(chan struct{})
	if s.pongs == nil {
		s.pongs = map[string]chan struct{}{}
	}
	s.pongs[id], s.pongs[marker] = pong, marked
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(s.pongs, id)
		delete(s.pongs, marker)
		h.mu.Unlock()
	}()
	if err := ps.Ping(ctx, id); err != nil {
		return false
	}
	if !h.publish(ctx, sub, marker) {
		marked = nil // only the PING tells
	}
	for pong != nil || marked != nil {
		select {
		case <-pong:
			pong = nil
		case <-marked:
			marked = nil
		case <-ctx.Done():
			return false
		}
	}
	return true
}

// syncPrefix begins every Sync's marker message (followed by the Hub's
// random id and a count): a Hub never delivers such a message.
const syncPrefix = "\x00keysub:sync:"

// publish publishes payload on sub's channel in sub's mode, with the
// Hub's client, and reports whether the server took it.
func (h *Hub) publish(ctx context.Context, sub *Sub, payload string) bool {
	c, ok := h.cfg.Client.(interface {
		Do(ctx context.Context, args ...any) *redis.Cmd
	})
	if !ok {
		return false
	}
	op := "PUBLISH"
	if sub.sharded {
		op = "SPUBLISH"
	}
	return c.Do(ctx, op, sub.channel, payload).Err() == nil
}

// ponged takes the server's answer to a PING sent on s with payload.
func (h *Hub) ponged(s *session, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if pong, ok := s.pongs[payload]; ok {
		close(pong)
		delete(s.pongs, payload)
	}
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
	h.loseLocked(sub)
	if sub.linger != nil {
		sub.linger.Stop()
		sub.linger = nil
	}
	if h.subs[sub.key()] == sub {
		delete(h.subs, sub.key())
	}
	s := sub.s
	if s == nil || s.subs[sub.channel] != sub {
		return
	}
	delete(s.subs, sub.channel)
	if s.ps != nil {
		s.unsubs[sub.channel]++
		h.enqueueLocked(s, sub.channel, true)
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
	var conns []*redis.PubSub
	for _, sub := range h.subs {
		if sub.linger != nil {
			sub.linger.Stop()
			sub.linger = nil
		}
		sub.gone = true
		h.loseLocked(sub)
	}
	clear(h.subs)
	for _, s := range h.sessions {
		s.stopping = true
		clear(s.subs)
		if s.ps != nil {
			conns = append(conns, s.ps)
		}
		select {
		case s.idle <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
	for _, ps := range conns {
		// Outside mu: Close waits for the connection's lock, which go-redis
		// holds while it redials a broken connection.
		_ = ps.Close() // ends a receive in progress
	}
	h.wg.Wait()
}

// command is a (S)SUBSCRIBE, or with unsub a (S)UNSUBSCRIBE, of channel
// ch on the connection ps.
type command struct {
	ps    *redis.PubSub
	ch    string
	unsub bool
}

// enqueueLocked queues a (S)SUBSCRIBE (with unsub, a (S)UNSUBSCRIBE) of
// ch on the connection of s, to be sent by send, and starts send unless it
// runs. The commands go out in the order they were decided, and nobody
// holds h.mu while they do: a command on a broken connection waits for
// its redial (go-redis redials in the read, holding the connection's
// lock), and on a black-holed server that lasts the client's timeouts.
// s.ps must not be nil; h.mu must be held.
func (h *Hub) enqueueLocked(s *session, ch string, unsub bool) {
	s.queue = append(s.queue, command{ps: s.ps, ch: ch, unsub: unsub})
	if !s.sending {
		// The loop of s runs (s.ps is set), so h.wg is above zero: Close
		// cannot be past its Wait.
		s.sending = true
		h.wg.Add(1)
		go h.send(s)
	}
}

// send sends the queued commands of s until none is left. A command on a
// connection that has ended fails at once; its replies are the loop's.
func (h *Hub) send(s *session) {
	defer h.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			h.mu.Lock()
			s.sending, s.queue = false, nil // lost: the loop's next connection subscribes what is wanted then
			h.mu.Unlock()
			if h.cfg.Panicked != nil {
				h.cfg.Panicked(r)
			}
		}
	}()
	for {
		h.mu.Lock()
		cmds := s.queue
		s.queue = nil
		if len(cmds) == 0 {
			s.sending = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		for _, c := range cmds {
			s.send(c)
		}
	}
}

// send sends c, sharded if s is.
func (s *session) send(c command) {
	ctx := context.Background()
	switch {
	case c.unsub && s.t.sharded:
		_ = c.ps.SUnsubscribe(ctx, c.ch)
	case c.unsub:
		_ = c.ps.Unsubscribe(ctx, c.ch)
	case s.t.sharded:
		_ = c.ps.SSubscribe(ctx, c.ch)
	default:
		_ = c.ps.Subscribe(ctx, c.ch)
	}
}

// loop subscribes s and delivers messages until it has had no channel for
// Config.Idle, subscribing again after a broken connection and, every
// RetryDenied, after a refusal.
func (h *Hub) loop(s *session) {
	defer h.wg.Done()
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
		ps, ok := h.connect(s)
		if !ok {
			return
		}
		confirmed, err := h.session(s, ps)
		if h.disconnect(s, ps, err) {
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
			h.refused(err)
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

// stopLocked ends the loop of s if s has no channel left or the Hub is
// closing, and reports whether it did. h.mu must be held.
func (h *Hub) stopLocked(s *session) bool {
	if len(s.subs) > 0 && !s.stopping {
		return false
	}
	s.running, s.ps = false, nil
	if h.sessions[s.t.name] == s {
		delete(h.sessions, s.t.name)
	}
	return true
}

// connect opens a connection subscribed to the channels of s and installs
// it (s.ps); ok is false when the loop is to end (s has no channel left,
// or the Hub is closing).
//
// The dial and the handshake (on a cluster, maybe the slot map too) run
// without h.mu: against a black-holed server they last the client's
// timeouts, and no Add, Remove or delivery of any channel may wait for
// them. While s.ps is nil, Add and Remove only note their channels; the
// difference is queued on the new connection when it is installed.
func (h *Hub) connect(s *session) (ps *redis.PubSub, ok bool) {
	h.mu.Lock()
	if h.stopLocked(s) {
		h.mu.Unlock()
		return nil, false
	}
	on := h.renewLocked(s)
	h.mu.Unlock()
	chans := make([]string, 0, len(on))
	for ch := range on {
		chans = append(chans, ch)
	}
	// Opened with its channels: a cluster client's sharded subscription
	// goes to the node of the first one.
	ps = s.t.open(context.Background(), chans...)
	h.mu.Lock()
	if s.stopping {
		h.endLocked(s)
		h.mu.Unlock()
		_ = ps.Close()
		return nil, false
	}
	s.ps = ps
	h.catchUpLocked(s, on)
	h.mu.Unlock()
	return ps, true
}

// renewLocked readies the subscriptions of s for a new connection, each
// waiting for its confirmation there, and returns them by channel. h.mu
// must be held.
func (h *Hub) renewLocked(s *session) map[string]*Sub {
	on := make(map[string]*Sub, len(s.subs))
	clear(s.unsubs)
	for ch, sub := range s.subs {
		on[ch] = sub
		sub.pending = 1
		select {
		case <-sub.ready:
			// Confirmed on a connection that is gone: whoever Adds
			// from now on waits for this one's confirmation.
			sub.ready, sub.at = make(chan struct{}), time.Time{}
			h.loseLocked(sub)
		default:
		}
	}
	return on
}

// catchUpLocked queues on the new connection of s what changed while it
// was opened with the channels on: the channels added since are
// subscribed, those removed unsubscribed. s.ps must be set; h.mu must be
// held.
func (h *Hub) catchUpLocked(s *session, on map[string]*Sub) {
	for ch := range on {
		if s.subs[ch] == nil {
			s.unsubs[ch]++
			h.enqueueLocked(s, ch, true)
		}
	}
	for ch, sub := range s.subs {
		switch on[ch] {
		case sub:
		case nil:
			sub.pending = 1
			h.subscribes++
			h.enqueueLocked(s, ch, false)
		default:
			// Removed and added again: the connection's SUBSCRIBE stands,
			// and its confirmation is this Sub's.
			sub.pending = 1
		}
	}
}

// disconnect forgets ps, the connection of s that session left with err,
// and reports whether the loop is to end: s has no channel left, whether
// the connection idled or broke (a closed client ends here too); the next
// Add starts a new loop.
func (h *Hub) disconnect(s *session, ps *redis.PubSub, err error) (done bool) {
	h.mu.Lock()
	s.ps = nil
	for _, sub := range s.subs {
		select {
		case <-sub.ready:
			// Confirmed on the connection that is gone: messages are
			// lost until the next one is confirmed.
			sub.ready, sub.at = make(chan struct{}), time.Time{}
			h.loseLocked(sub)
		default:
		}
	}
	done = h.stopLocked(s) || errors.Is(err, redis.ErrClosed)
	if done {
		h.endLocked(s)
	}
	h.mu.Unlock()
	_ = ps.Close()
	return done
}

// refused notes the server's refusal err of a (S)SUBSCRIBE and tells
// Config.Refused.
func (h *Hub) refused(err error) {
	h.mu.Lock()
	first := !h.denied
	h.denied, h.refusal = true, err.Error()
	h.mu.Unlock()
	if h.cfg.Refused != nil {
		h.cfg.Refused(err, first)
	}
}

// quiet is what session knows of its connection's silence.
type quiet struct {
	pinged    bool      // a PING was sent after the last read timed out; cleared by any reply
	idleSince time.Time // since when s has had no channel; zero while it has some
}

// session reads ps until its connection fails (err) or it has been idle,
// with no channel, for Config.Idle (err nil).
func (h *Hub) session(s *session, ps *redis.PubSub) (confirmed bool, err error) {
	var q quiet
	for {
		msg, err := ps.ReceiveTimeout(context.Background(), Ping)
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout() && !q.pinged:
			if end, err := h.silent(s, ps, &q); end {
				return confirmed, err
			}
			continue
		case err != nil:
			return confirmed, err
		}
		q.pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			switch m.Kind {
			case "subscribe", "ssubscribe":
				confirmed = true
				h.subscribed(s, m.Channel)
			case "unsubscribe", "sunsubscribe":
				h.unsubscribed(s, m.Channel)
			}
		case *redis.Message:
			if strings.HasPrefix(m.Payload, syncPrefix) {
				h.ponged(s, m.Payload) // a Sync's marker, this Hub's or another's
				continue
			}
			h.mu.Lock()
			h.delivered++
			h.mu.Unlock()
			if h.cfg.Deliver != nil {
				h.cfg.Deliver(m.Channel, m.Payload)
			}
		case *redis.Pong:
			if m.Payload != "" {
				h.ponged(s, m.Payload)
			}
		}
	}
}

// silent answers a read of ps that timed out with nothing pending: end
// is true, with err, when the session is to end (the Hub closes:
// redis.ErrClosed; s has had no channel for Config.Idle: nil; the PING
// fails: its error); otherwise it has sent a PING.
func (h *Hub) silent(s *session, ps *redis.PubSub, q *quiet) (end bool, err error) {
	h.mu.Lock()
	nobody, stopping := len(s.subs) == 0, s.stopping
	h.mu.Unlock()
	if stopping {
		return true, redis.ErrClosed
	}
	if nobody {
		if q.idleSince.IsZero() {
			q.idleSince = time.Now()
		} else if time.Since(q.idleSince) >= h.cfg.Idle {
			return true, nil
		}
	} else {
		q.idleSince = time.Time{}
	}
	q.pinged = true
	if err := ps.Ping(context.Background()); err != nil {
		return true, err
	}
	return false, nil
}

// subscribed takes the server's confirmation of a (S)SUBSCRIBE of channel
// on s: once the last one sent is confirmed, the subscription is ready.
func (h *Hub) subscribed(s *session, channel string) {
	h.mu.Lock()
	restored := h.denied
	h.denied, h.refusal = false, ""
	if sub := s.subs[channel]; sub != nil {
		if sub.pending--; sub.pending <= 0 {
			sub.pending = 0
			select {
			case <-sub.ready:
			default:
				// The time first: whoever ready wakes must find its
				// subscription confirmed before anything it does next
				// (see State).
				sub.at = time.Now()
				close(sub.ready)
			}
		}
	}
	h.mu.Unlock()
	if restored && h.cfg.Restored != nil {
		h.cfg.Restored()
	}
}

// unsubscribed takes the server's confirmation of a (S)UNSUBSCRIBE of
// channel on s, asked for or not.
func (h *Hub) unsubscribed(s *session, channel string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.unsubs[channel] > 0 {
		s.unsubs[channel]--
	} else if sub := s.subs[channel]; sub != nil && sub.pending == 0 {
		// Not asked for: the slot moved to another master. Those waiting
		// now poll; the next Add subscribes where the slot is now.
		sub.gone = true
		h.loseLocked(sub)
		delete(s.subs, channel)
		if h.subs[sub.key()] == sub {
			delete(h.subs, sub.key())
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
	for _, sub := range s.subs {
		sub.gone = true
		h.loseLocked(sub)
		if h.subs[sub.key()] == sub {
			delete(h.subs, sub.key())
		}
	}
}
