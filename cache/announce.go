package cache

import (
	"context"
	"strings"
	"sync"

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
	channel string
	ps      *redis.PubSub
	done    chan struct{} // closed when the receive loop has ended

	mu      sync.Mutex // guards waiters
	waiters map[string]map[*waiter]struct{}
}

func startAnnouncer(rc RedisClient, channel string) *announcer {
	a := &announcer{
		channel: channel,
		ps:      rc.Subscribe(context.Background(), channel),
		done:    make(chan struct{}),
		waiters: map[string]map[*waiter]struct{}{},
	}
	go a.loop()
	return a
}

// loop delivers messages until the subscription is closed. go-redis
// reconnects and resubscribes by itself after network errors.
func (a *announcer) loop() {
	defer close(a.done)
	for m := range a.ps.Channel() {
		p := m.Payload
		if len(p) < 2 {
			continue
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
	_ = a.ps.Close()
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
