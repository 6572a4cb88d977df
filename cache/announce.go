package cache

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Announcements tell waiting processes that a rebuild ended. One channel
// per namespace, one subscription per Cache (not per key); in a cluster,
// PUBLISH reaches subscribers on every node. Messages are
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

// waiter receives the next notice for one key.
type waiter struct{ ch chan notice }

type announcer struct {
	rc      RedisClient
	channel string
	denied  func(op string, err error, first bool) // told of each refused SUBSCRIBE or PUBLISH
	ok      func(op string)                        // told when op works again after a refusal
	ctx     context.Context                        // ends when close is called
	cancel  context.CancelFunc
	done    chan struct{} // closed when the receive loop has ended

	psMu sync.Mutex    // guards ps
	ps   *redis.PubSub // the current subscription; nil between them

	// The server's last refusal of SUBSCRIBE and of PUBLISH on the
	// channel; nil once the command has worked since.
	subRefused, pubRefused atomic.Pointer[string]

	mu      sync.Mutex // guards waiters
	waiters map[string]map[*waiter]struct{}
}

// Timings of the subscription. The health check stands in for go-redis's
// (PubSub.Channel swallows every error, a refused SUBSCRIBE among them, so
// the loop receives by itself): a connection silent for pingEvery gets a
// PING, and one silent for another pingEvery is replaced.
const (
	pingEvery        = 3 * time.Second
	resubscribeAfter = 100 * time.Millisecond // after a broken connection, doubling while it fails
	resubscribeMax   = 2 * time.Second
	retryDenied      = 10 * time.Second // after a refused SUBSCRIBE
)

func startAnnouncer(rc RedisClient, channel string, denied func(op string, err error, first bool), ok func(op string)) *announcer {
	a := &announcer{
		rc:      rc,
		channel: channel,
		denied:  denied,
		ok:      ok,
		done:    make(chan struct{}),
		waiters: map[string]map[*waiter]struct{}{},
	}
	a.ctx, a.cancel = context.WithCancel(context.Background())
	// The first SUBSCRIBE is sent before New returns, as the waits that
	// follow assume: an announcement published after New returned reaches
	// this process (unless the connection fails). Its reply, a refusal
	// included, is read by the loop.
	ps := rc.Subscribe(a.ctx)
	subErr := ps.Subscribe(a.ctx, channel)
	a.ps = ps
	go a.loop(ps, subErr)
	return a
}

// loop subscribes and delivers messages until close, subscribing again
// after a broken connection and, every retryDenied, after a refusal.
//
// ps is the first subscription, its SUBSCRIBE already sent (subErr is
// what sending it returned).
func (a *announcer) loop(ps *redis.PubSub, subErr error) {
	defer close(a.done)
	backoff := resubscribeAfter
	for {
		if ps == nil {
			a.psMu.Lock()
			if a.ctx.Err() != nil {
				a.psMu.Unlock()
				return
			}
			ps = a.rc.Subscribe(a.ctx)
			a.ps = ps
			a.psMu.Unlock()
			// Outside psMu: close must not wait for a slow server. A close
			// meanwhile closes ps, which fails this or the session's read.
			subErr = ps.Subscribe(a.ctx, a.channel)
		}

		confirmed, err := a.session(ps, subErr)

		a.psMu.Lock()
		a.ps = nil
		a.psMu.Unlock()
		_ = ps.Close()
		ps = nil

		if confirmed {
			backoff = resubscribeAfter
		}
		wait := backoff
		backoff = min(2*backoff, resubscribeMax)
		if redisx.IsNoPerm(err) {
			a.refused("SUBSCRIBE", err)
			wait = retryDenied
		}
		t := time.NewTimer(wait)
		select {
		case <-a.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session reads the reply to ps's SUBSCRIBE and delivers its messages until the connection
// fails, the server refuses the subscription, or close. confirmed reports
// whether the server confirmed the subscription.
func (a *announcer) session(ps *redis.PubSub, subErr error) (confirmed bool, err error) {
	if subErr != nil {
		return false, subErr
	}
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(a.ctx, pingEvery)
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout() && !pinged && a.ctx.Err() == nil:
			pinged = true
			if err := ps.Ping(a.ctx); err != nil {
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
				a.worked("SUBSCRIBE")
			}
		case *redis.Message:
			a.deliver(m.Payload)
		}
	}
}

func (a *announcer) state(op string) *atomic.Pointer[string] {
	if op == "PUBLISH" {
		return &a.pubRefused
	}
	return &a.subRefused
}

// refused records that the server refused op (SUBSCRIBE or PUBLISH) on the
// channel and tells the Cache, saying whether it is the first refusal
// since op last worked.
func (a *announcer) refused(op string, err error) {
	msg := err.Error()
	first := a.state(op).Swap(&msg) == nil
	a.denied(op, err, first)
}

// worked records that op worked, telling the Cache if it had been refused.
func (a *announcer) worked(op string) {
	if a.state(op).Load() != nil && a.state(op).Swap(nil) != nil {
		a.ok(op)
	}
}

// refusal returns the server's last refusal of the channel, "" if none
// stands.
func (a *announcer) refusal() string {
	for _, p := range []*atomic.Pointer[string]{&a.subRefused, &a.pubRefused} {
		if m := p.Load(); m != nil {
			return *m
		}
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
		// this one instead. Only this loop sends, so the second send
		// cannot block.
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

func (a *announcer) unregister(key string, w *waiter) {
	a.mu.Lock()
	if set := a.waiters[key]; set != nil {
		delete(set, w)
		if len(set) == 0 {
			delete(a.waiters, key)
		}
	}
	a.mu.Unlock()
}

func (a *announcer) close() {
	a.psMu.Lock()
	a.cancel()
	if a.ps != nil {
		_ = a.ps.Close() // ends a receive in progress
	}
	a.psMu.Unlock()
	<-a.done
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
