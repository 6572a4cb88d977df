package cache

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Announcements tell waiting processes that a rebuild ended, or that a Set
// or Delete changed the key. Each key has its own channel, NS:{K}:ann, in
// the key's cluster slot (announcer.channel): the writer publishes there
// (SPUBLISH where the server has sharded pub/sub, so that on a Redis
// Cluster the message stays on the shard that owns the key; PUBLISH
// otherwise), and a process subscribes to it only while one of its callers
// waits for the key, and for announceLinger after (a hot key that expires
// again soon is not subscribed anew). A write that nobody waits for costs
// one publish that reaches nobody. With Options.Broadcast every
// announcement goes to one channel per namespace, NS:announce, with
// PUBLISH, and every Cache subscribes to it for its life (the design
// before per-key channels). Messages are
//
//	'v' key [\0 token [\0 entry]]  a value was written (or the write lost a
//	                               race): use entry if present, else read
//	                               the key again
//	'n' key \0 token               the loader found nothing; nothing stored
//	'e' key \0 token \0 text       the loader failed with text
//
// where key is the stored value key (it never contains a NUL byte) and
// token is that of the lock the rebuild held. Small entries travel in the
// message, which saves each waiter a round trip. A waiter takes an entry,
// a not-found or an error from a message only if it carries the token of
// the claim the waiter saw on the key: a message from an older rebuild,
// published after a Delete or Set, only makes it read the key again. A
// lost message costs a waiter one poll interval, never correctness.
//
// Which of SPUBLISH and PUBLISH the server has is learnt by a probe
// (keysub.Probe), whose answer may be "not known yet" (it met BUSY,
// LOADING, a timeout). Nobody acts on a guess, since the other processes
// may know: a waiter then subscribes nothing, reads the key again after a
// short re-probe step (keysub.Reprobe: 10ms doubling to 500ms, not its
// poll) and probes again, so that it subscribes in the server's mode
// within a step and a round trip of the server answering (see subscribe);
// a writer publishes in both modes, so that every waiter hears it
// whichever mode it subscribed in (see publish). A subscription is only
// ever made in a mode the server said it has, so none in the wrong mode
// is kept.
const (
	noticeValue    = 'v'
	noticeNotFound = 'n'
	noticeError    = 'e'
)

type notice struct {
	kind  byte
	token string // the rebuild's lock token; empty from Set
	text  string // the error text ('e') or the entry ('v'), if any
}

// inlineMax is the largest entry sent along with its announcement.
const inlineMax = 8 << 10

// announceLinger is how long a key's channel stays subscribed after the
// last caller of the process stopped waiting for it.
const announceLinger = 10 * time.Second

// waiter receives the next notice for one key. Its subscription is taken
// when it starts to wait (subscribe, prepare), not when it registers: most
// callers that register find a value and never wait. It is used by one
// goroutine at a time: the flight that waits with it.
type waiter struct {
	ch    chan notice
	sub   *keysub.Sub // nil until subscribe, and while the probe does not know the mode
	dead  bool        // nothing could be subscribed: only the poll helps
	tries int         // subscribes that found the mode unknown, and so subscribed nothing
	step  *time.Timer // closes the channel of the last re-probe step (see reprobe); stopped by unregister
}

// pending takes the notice received and not yet taken, if any.
func (w *waiter) pending() (notice, bool) {
	select {
	case n := <-w.ch:
		return n, true
	default:
		return notice{}, false
	}
}

// announcer publishes a Cache's announcements and delivers those it
// receives to the waiters of this process.
type announcer struct {
	rc        RedisClient
	ns        string
	broadcast bool                                   // Options.Broadcast: one channel, ns:announce
	denied    func(op string, err error, first bool) // told of each refused (S)SUBSCRIBE or (S)PUBLISH
	ok        func(op string)                        // told when op works again after a refusal
	hub       *keysub.Hub
	whole     *keysub.Sub // with broadcast, the namespace channel's subscription, held until close
	probe     keysub.Probe

	// The server's last refusal of publishing; nil once it has worked
	// since. Refusals of subscribing are the hub's.
	pubRefused atomic.Pointer[string]

	rechecks  atomic.Uint64 // waits that read the key again once subscribed, or after a re-probe step (see Cache.await, subscribe), for tests
	covered   atomic.Uint64 // waits that began subscribed before their read (every notice reaches them), for tests
	lostWaits atomic.Uint64 // covered waits ended because their subscription's connection failed, for tests

	// beforeSubscribe, set only by tests before the Cache is used, runs
	// when a waiter is about to subscribe, after its read of the key.
	beforeSubscribe func(key string)
	// twoStep, set only by tests before the Cache is used, makes a miss's
	// write announce after its reply, as where the write's script cannot
	// publish (see Cache.replaceAnnouncing).
	twoStep bool

	mu      sync.Mutex // guards waiters
	waiters map[string]map[*waiter]struct{}
}

func startAnnouncer(rc RedisClient, ns string, broadcast bool, denied func(op string, err error, first bool), ok func(op string)) *announcer {
	a := &announcer{
		rc:        rc,
		ns:        ns,
		broadcast: broadcast,
		denied:    denied,
		ok:        ok,
		waiters:   map[string]map[*waiter]struct{}{},
	}
	sub := "SSUBSCRIBE"
	if broadcast {
		sub = "SUBSCRIBE"
	}
	cfg := keysub.Config{
		Client:   rc,
		Deliver:  func(_, payload string) { a.deliver(payload) },
		Refused:  func(err error, first bool) { a.denied(sub, err, first) },
		Restored: func() { a.ok(sub) },
	}
	if !broadcast {
		cfg.Linger = announceLinger
	}
	a.hub = keysub.New(cfg)
	if broadcast {
		// Subscribed from the start, for the Cache's life: the waits that
		// follow find it confirmed (until then they read the key again
		// once it is, see await).
		a.whole, _, _ = a.hub.Add(context.Background(), a.wholeChannel(), false)
	}
	return a
}

// wholeChannel is the namespace's channel, used with Options.Broadcast.
func (a *announcer) wholeChannel() string { return a.ns + ":announce" }

// channel returns the channel of the stored value key value (NS:{tag}),
// and whether it is a shard channel, a classic one, or not known yet
// (keysub.Unknown: see the top of this file).
func (a *announcer) channel(ctx context.Context, value string) (string, keysub.Mode) {
	if a.broadcast {
		return a.wholeChannel(), keysub.Classic
	}
	// The probe's empty message goes to a channel nobody subscribes to.
	return value + ":ann", a.probe.Mode(ctx, a.rc, a.ns+":probe")
}

// publish queues the announcement msg about the value key value on pipe
// (SPUBLISH or PUBLISH) and returns its command. Where the probe does not
// know which the server has, it queues both, SPUBLISH first, and returns
// the SPUBLISH: on a server with sharded pub/sub, the one its outcome is
// reported of (a user may be granted SPUBLISH alone, see
// docs/permissions.md, so a refused PUBLISH beside it says nothing); on a
// server without, its unknown command is no failure (see published), the
// PUBLISH beside it having gone out. A subscriber hears one of the two:
// the one it subscribed in (see subscribe).
func (a *announcer) publish(ctx context.Context, pipe redis.Pipeliner, value, msg string) *redis.IntCmd {
	ch, mode := a.channel(ctx, value)
	switch mode {
	case keysub.Classic:
		return pipe.Publish(ctx, ch, msg)
	case keysub.Unknown:
		spub := pipe.SPublish(ctx, ch, msg)
		pipe.Publish(ctx, ch, msg)
		return spub
	}
	return pipe.SPublish(ctx, ch, msg)
}

// shardPublisher is what publishOne prefers of a client; every go-redis
// UniversalClient has it.
type shardPublisher interface {
	SPublish(ctx context.Context, channel string, message any) *redis.IntCmd
}

// publishOne sends the announcement msg about the value key value; where
// the probe does not know the server's mode, in both modes in one
// pipeline, returning the SPUBLISH's error as publish does.
func (a *announcer) publishOne(ctx context.Context, value, msg string) error {
	ch, mode := a.channel(ctx, value)
	switch mode {
	case keysub.Classic:
		return a.rc.Publish(ctx, ch, msg).Err()
	case keysub.Unknown:
		pipe := a.rc.Pipeline()
		spub := pipe.SPublish(ctx, ch, msg)
		pipe.Publish(ctx, ch, msg)
		_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
		return spub.Err()
	}
	if sp, ok := a.rc.(shardPublisher); ok {
		return sp.SPublish(ctx, ch, msg).Err()
	}
	return a.rc.Do(ctx, "spublish", ch, msg).Err()
}

// pubOp names the publishing command whose outcome a publish reported,
// for reports. It asks the server nothing: a publish made while the mode
// was not known reported its SPUBLISH's.
func (a *announcer) pubOp() string {
	if a.broadcast || a.probe.Known() == keysub.Classic {
		return "PUBLISH"
	}
	return "SPUBLISH"
}

// published records the outcome of a publish: a refusal is counted and
// reported (refusal reports whether err was one). An unknown command is a
// refusal too, but one no grant cures and nobody is told of: the SPUBLISH
// of an announcement sent in both modes, while the probe did not know, to
// a server without sharded pub/sub (the PUBLISH beside it went out; the
// probe learns the rest at its next call).
func (a *announcer) published(err error) (refusal bool) {
	switch {
	case redisx.IsUnknownCommand(err):
		return true
	case redisx.IsNoPerm(err):
		msg := err.Error()
		first := a.pubRefused.Swap(&msg) == nil
		a.denied(a.pubOp(), err, first)
		return true
	case err == nil:
		if a.pubRefused.Load() != nil && a.pubRefused.Swap(nil) != nil {
			a.ok(a.pubOp())
		}
	}
	return false
}

// refusal returns the server's last refusal of the announcements, "" if
// none stands.
func (a *announcer) refusal() string {
	if m := a.hub.Refusal(); m != "" {
		return m
	}
	if m := a.pubRefused.Load(); m != nil {
		return *m
	}
	return ""
}

// deliver hands one message to the waiters for its key.
func (a *announcer) deliver(p string) {
	if len(p) < 2 {
		return
	}
	n := notice{kind: p[0]}
	key := p[1:]
	if i := strings.IndexByte(key, 0); i >= 0 {
		key, n.token = key[:i], key[i+1:]
		if j := strings.IndexByte(n.token, 0); j >= 0 {
			n.token, n.text = n.token[:j], n.token[j+1:]
		}
	}
	a.mu.Lock()
	for w := range a.waiters[key] {
		// The newest notice wins: a waiter with an older one pending
		// (perhaps from a rebuild it did not see claim the key) gets
		// this one instead. Only the hub's loop for this channel sends,
		// and always under mu, so the second send cannot block.
		select {
		case w.ch <- n:
		default:
			select {
			case <-w.ch:
			default:
			}
			w.ch <- n
		}
	}
	a.mu.Unlock()
}

// register makes w receive the notices for the value key from now on, as
// far as this process is subscribed to them (see subscribe).
func (a *announcer) register(key string) *waiter {
	w := &waiter{ch: make(chan notice, 1)}
	a.mu.Lock()
	set := a.waiters[key]
	if set == nil {
		set = map[*waiter]struct{}{}
		a.waiters[key] = set
	}
	set[w] = struct{}{}
	a.mu.Unlock()
	return w
}

// subscribe makes sure this process is subscribed to the channel of w's
// key, the value key, for as long as w is registered, and returns what a
// waiter whose read of the key was sent at sent must wait for besides
// notices and its poll:
//
//   - nil if the server had confirmed the subscription before that read
//     was sent: every announcement of a write the read did not see reaches
//     w, as long as that confirmation stands; lost closes when it ends
//     (the connection failed: what was published until the next
//     confirmation reached nobody here), and the waiter must then read
//     the key again, and wait for the next confirmation;
//   - nil too where nothing can be subscribed (the client cannot, or the
//     server refuses): only the poll helps;
//   - a channel closed once the server confirms the subscription, if it
//     had not before the read: an announcement published between the
//     read and that moment reached nobody here, so the waiter must read
//     the key once more then (see Cache.await);
//   - a channel closed after a re-probe step (reprobe) when the probe does
//     not know yet which mode the server has: nothing is subscribed, as a
//     subscription in a guessed mode would hear nothing of writers that
//     know; the waiter reads the key again then, and comes back here,
//     which asks again. Its wait is paced by these steps (at most
//     keysub.ReprobeMax), not by its poll, until the server answers.
func (a *announcer) subscribe(ctx context.Context, key string, w *waiter, sent time.Time) (ready, lost <-chan struct{}) {
	if !a.join(ctx, key, w) {
		return w.reprobe(), nil
	}
	if w.dead {
		return nil, nil
	}
	ready, at, lost := a.hub.State(w.sub)
	switch {
	case ready == nil:
		return nil, nil
	case !at.IsZero() && at.Before(sent):
		return nil, lost
	}
	return ready, nil
}

// join subscribes this process to the channel of w's key, the value key,
// in the mode the server has, unless w has done so (or found that nothing
// can be subscribed). It reports false, having subscribed nothing, when
// the probe does not know the mode yet.
func (a *announcer) join(ctx context.Context, key string, w *waiter) bool {
	if w.sub != nil || w.dead {
		return true
	}
	if a.beforeSubscribe != nil {
		a.beforeSubscribe(key)
	}
	ch, mode := a.channel(ctx, key)
	if mode == keysub.Unknown {
		return false
	}
	var live bool
	w.sub, _, live = a.hub.Add(ctx, ch, mode == keysub.Sharded)
	w.dead = !live
	return true
}

// reprobe returns a channel closed after w's next re-probe step
// (keysub.Reprobe: each step twice the last, up to keysub.ReprobeMax).
// Its timer's function only closes the channel; unregister stops it.
func (w *waiter) reprobe() <-chan struct{} {
	ch := make(chan struct{})
	if w.step != nil {
		w.step.Stop()
	}
	w.step = time.AfterFunc(keysub.Reprobe(w.tries), func() { close(ch) })
	w.tries++
	return ch
}

// prepare subscribes w before its first read, for a caller that found
// another process's claim on the key and so will most likely wait, and
// waits at most d (or until ctx ends) for the server to confirm it. Then
// every announcement of the rebuild reaches w, which matters for those the
// key keeps no trace of: a failed load ('e'), whose waiters would
// otherwise find the key free on their next read and load themselves.
// Where the probe does not know the server's mode yet, it subscribes
// nothing and returns at once: the read that follows is needed anyway,
// and the wait after it asks again (see subscribe).
func (a *announcer) prepare(ctx context.Context, key string, w *waiter, d time.Duration) {
	if !a.join(ctx, key, w) {
		return
	}
	ready, _ := a.subscribe(ctx, key, w, time.Now())
	if ready == nil {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ready:
	case <-t.C:
	case <-ctx.Done():
	}
}

// settle waits, at most d, until the announcements published on w's
// channel before now have reached w, if w is subscribed: see
// keysub.Hub.Sync.
func (a *announcer) settle(ctx context.Context, w *waiter, d time.Duration) {
	if w.sub == nil || w.dead {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	a.hub.Sync(ctx, w.sub)
}

func (a *announcer) unregister(key string, w *waiter) {
	a.mu.Lock()
	if set := a.waiters[key]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(a.waiters, key)
		}
	}
	a.mu.Unlock()
	if w.step != nil {
		w.step.Stop()
		w.step = nil
	}
	if w.sub != nil {
		a.hub.Remove(w.sub)
		w.sub = nil
	}
}

// counts returns how many messages this Cache has received and how many
// channel subscriptions it sent on open connections, for tests.
func (a *announcer) counts() (delivered, subscribes uint64) { return a.hub.Counts() }

func (a *announcer) close() {
	a.hub.Close()
}

func message(kind byte, key, token, text string) string {
	switch {
	case text != "":
		return string(kind) + key + "\x00" + token + "\x00" + text
	case token != "":
		return string(kind) + key + "\x00" + token
	}
	return string(kind) + key
}
