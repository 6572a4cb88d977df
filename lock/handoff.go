package lock

import (
	"context"
	_ "embed"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/keysub"
	"github.com/hotkv/stampede/internal/redisx"
)

// Hand-off: an Obtain with a Retry that finds the lock held joins a wait
// queue kept next to the lock (queueKey, in the lock's cluster slot) and
// subscribes to the lock's channel (handoffChannel). Releasing a lock
// obtained with a Retry hands it, in the same script, to the first live
// waiter in the queue (newcomers' SET NX fails meanwhile) and publishes that
// waiter's token; the waiter, woken, extends the lock to its own TTL and
// returns. The waiter's poll, paced by its RetryStrategy, stays as the
// safety net: it refreshes the waiter's entry, finds a lock handed to it
// whose notification was lost, and hands a lock found free (expired, or
// released without hand-off) to the first live waiter. See handoff.lua.
//
// The channel is a shard channel (SPUBLISH, SSUBSCRIBE) where the server
// has sharded pub/sub, a classic one elsewhere, as the Client's probe
// (keysub.Probe) learns; its answer may be "not known yet" (it met BUSY,
// LOADING, a timeout), and nobody acts on a guess, since other Clients may
// know. A waiter that does not know subscribes nothing and does not join
// the queue, where a hand-off to it would go unheard: its attempts take
// the lock only if it is free, and it asks again at each re-probe step
// (keysub.Reprobe: 10ms doubling to 500ms), woken for them whatever its
// RetryStrategy, until the server answers; then it subscribes in the mode
// the server has and, once the subscription is confirmed, queues (see
// wakerListen). A release, or a waiter's step that hands the lock on,
// publishes in both modes while its Client does not know (see
// handoffReply): every waiter listens in one of them.
//
// Why hand the lock over rather than have newcomers queue behind waiters:
// an uncontended Obtain stays one SET NX (a newcomer needs no script to
// learn whether anyone waits), the key is never free between holders, so
// no newcomer can slip in however slowly the woken waiter is scheduled,
// and a waiter learns of a hand-off by reading the key, which its poll
// does anyway. The price is a script for the release of a lock obtained
// with a Retry (measured: a few µs) and one round trip for the woken
// waiter to extend the lock to its own TTL, which keeps the hold of a lock
// handed to a dead waiter as short as its queue entry's life.

//go:embed handoff.lua
var handoffSrc string

// handoffKeys are the keys and channel of one lock's hand-off.
type handoffKeys struct {
	keys    []string // lock, queue, entries, fence counter
	channel string
	// sharded is the channel's mode as the probe knew it when the Obtain
	// began: keysub.Sharded (SPUBLISH, SSUBSCRIBE), keysub.Classic
	// (PUBLISH, SUBSCRIBE), or keysub.Unknown, which every use asks the
	// probe about again (pubsub, wakerListen).
	sharded keysub.Mode
}

// handoffKeysFor returns key's hand-off keys; ok is false for keys that
// cannot have siblings (a '}' but no hash tag).
func handoffKeysFor(key string) (handoffKeys, bool) {
	q, ok := queueKey(key)
	if !ok {
		return handoffKeys{}, false
	}
	e, _ := redisx.Sibling(key, "queue:entries")
	f, _ := FenceKey(key)
	ch, _ := handoffChannel(key)
	return handoffKeys{keys: []string{key, q, e, f}, channel: ch}, true
}

// queueKey returns the key of the wait queue of the lock on key (a sorted
// set of waiters' tokens), in the same cluster slot as key; ok is false
// for keys that cannot have one (a '}' but no hash tag). Next to it,
// queueKey(key)+":entries" holds each waiter's entry (a hash). Both expire
// with their last entry, an entry a little over two back-off steps after
// its waiter last polled. docs/permissions.md spells both for ACL rules.
func queueKey(key string) (queue string, ok bool) { return redisx.Sibling(key, "queue") }

// handoffChannel returns the channel on which a release announces that
// it handed the lock on key to a waiter (the message is the waiter's
// token); ok is false for keys that cannot have one.
func handoffChannel(key string) (channel string, ok bool) { return redisx.Sibling(key, "handoff") }

// entryLife is how long a waiter's queue entry lives after a poll that is
// followed by a wait of at most wait: a dead waiter leaves a gap no longer
// than this, a live one refreshes it in time.
func entryLife(wait time.Duration) time.Duration { return 2*wait + 100*time.Millisecond }

// heartbeat is when a waiter's queue entry was last refreshed, and for
// how long.
type heartbeat struct {
	at   time.Time
	life time.Duration
}

// due reports whether the entry must be refreshed by the next poll, one
// that is followed by a wait of wait: it would otherwise have less than
// half its life left by the poll after.
func (h heartbeat) due(wait time.Duration) bool {
	return h.at.IsZero() || time.Since(h.at) >= h.life/2-wait
}

// heldByOther reports whether key holds another acquisition than value,
// with a plain GET: a queued waiter's poll needs no script then. An error
// reports false, leaving the answer to the script.
func (c *Client) heldByOther(ctx context.Context, key, value string) bool {
	v, err := c.conn.Client().Get(ctx, key).Result()
	return err == nil && v != value
}

// handoffUsable reports whether hand-off can be used for key: the server
// runs scripts for the client's user, this client has not found the
// hand-off refused, and key has siblings. Where it cannot, it says why
// once (Options.Logger, Warn).
func (c *Client) handoffUsable(ctx context.Context, key string) (handoffKeys, bool) {
	if !c.handoffOn() {
		return handoffKeys{}, false
	}
	hk, ok := handoffKeysFor(key)
	if !ok {
		return handoffKeys{}, false
	}
	caps, err := c.conn.CapabilitiesFor(ctx, key)
	if err != nil {
		return handoffKeys{}, false
	}
	if caps.ScriptsDenied != "" {
		c.handoffRefused(caps.ScriptsDenied, true)
		return handoffKeys{}, false
	}
	hk.sharded = c.pubsubMode(ctx, hk.channel)
	return hk, true
}

// pubsubMode reports whether the server has sharded pub/sub (SPUBLISH,
// Redis and Valkey >= 7), learnt once per Client with an SPUBLISH of an
// empty message on channel, which no waiter takes for a token; or that it
// has not said yet (keysub.Unknown: the probe met a transient reply, and
// the next call asks again). Hand-offs go out with SPUBLISH and waiters
// subscribe with SSUBSCRIBE where it has: on a Redis Cluster a message
// stays on the shard that owns the lock's key instead of being broadcast
// to every node. Every Client of one server learns the same, so releasers
// and waiters agree, as neither acts on Unknown as if it were an answer.
func (c *Client) pubsubMode(ctx context.Context, channel string) keysub.Mode {
	// A refused SPUBLISH still says the server has it; the warning about
	// the refused channel follows on the first hand-off.
	return c.sharded.Mode(ctx, c.conn.Client(), channel)
}

// pubsub returns the mode hand-offs on hk's channel go out in: hk's, or,
// where the probe did not know it when hk was made, its answer now.
func (c *Client) pubsub(ctx context.Context, hk handoffKeys) keysub.Mode {
	if hk.sharded != keysub.Unknown {
		return hk.sharded
	}
	return c.pubsubMode(ctx, hk.channel)
}

// refusal is a definite refusal by the server (redisx.IsRefusal), kept
// until it is re-checked.
type refusal struct {
	reply string
	at    time.Time
}

// handoffOn reports whether hand-off may be tried: the server has not
// refused it, or its refusal is older than the re-check interval (the
// operator may have granted what it needs since; if not, the next try is
// refused again and kept again).
func (c *Client) handoffOn() bool {
	r := c.handoffOff.Load()
	if r == nil {
		return true
	}
	if time.Since(r.at) < c.conn.Recheck() {
		return false
	}
	c.handoffOff.CompareAndSwap(r, nil)
	return true
}

// handoffRefused turns hand-off off for this client for a while after the
// server refused it definitely (redisx.IsRefusal: scripts, or a command or
// key the script needs, denied by the ACL (perm) or unknown to the
// server), with a warning naming the reply, once per reply: waiters then
// poll, as they did before hand-off. handoffOn tries again later.
func (c *Client) handoffRefused(reply string, perm bool) {
	c.handoffOff.Store(&refusal{reply: reply, at: time.Now()})
	if last := c.handoffLog.Swap(&reply); last != nil && *last == reply {
		return
	}
	fix := "the server does not run it"
	if perm {
		fix = "grant the commands listed in docs/permissions.md"
	}
	c.log(slog.LevelWarn, "waiters poll for released locks instead of being handed them: the server refused the hand-off script ("+fix+
		")", "err", reply, "retry_after", c.conn.Recheck())
}

// handoffWorks is told when the hand-off script ran: after a refusal was
// warned of, it says once that hand-off works again.
func (c *Client) handoffWorks() {
	if c.handoffLog.Load() != nil && c.handoffLog.Swap(nil) != nil {
		c.log(slog.LevelInfo, "hand-off works again: the server ran the hand-off script")
	}
}

// publishRefused warns, once, that the server refused a hand-off's
// announcement: waiters then learn of it by their poll.
func (c *Client) publishRefused(msg string) {
	if msg != "" && c.pubDenied.CompareAndSwap(false, true) {
		c.log(slog.LevelWarn, "waiters learn of hand-offs by polling: the server refused PUBLISH (SPUBLISH with sharded pub/sub) on the hand-off channel "+
			"(grant the channel, see docs/permissions.md)", "err", msg)
	}
}

// scriptUnusable reports whether err says the hand-off script cannot run
// for this user or server, a definite refusal (redisx.IsRefusal), so that
// the caller falls back to the plain operation. Anything else (BUSY, OOM
// or any other error raised inside the script, which Redis >= 7 words
// "... script: <sha>", a transport error, a bad fence counter) fails the
// one call.
func scriptUnusable(err error) bool {
	return redisx.IsRefusal(err) && !strings.Contains(err.Error(), "lock: fence counter")
}

// handoffReply runs the hand-off script and returns its reply's code (the
// reply itself or its first element) and its second element, an integer
// or a string. A hand-off the script makes is published in the channel's
// mode (pubsub), or, where the probe still does not know it, in both: a
// waiter listens in one of them, the one its own probe learnt.
func (c *Client) handoffReply(ctx context.Context, hk handoffKeys, mode string, args ...any) (code int64, n int64, s string, err error) {
	switch c.pubsub(ctx, hk) {
	case keysub.Sharded:
		mode += "s"
	case keysub.Unknown:
		mode += "b"
	}
	all := make([]any, 0, 2+len(args))
	all = append(append(all, mode, hk.channel), args...)
	r, err := c.handoff.Run(ctx, c.conn.Client(), hk.keys, all...).Result()
	if err != nil {
		return 0, 0, "", err
	}
	switch v := r.(type) {
	case int64:
		return v, 0, "", nil
	case []any:
		if len(v) == 0 {
			break
		}
		code, _ = v[0].(int64)
		if len(v) > 1 {
			switch x := v[1].(type) {
			case int64:
				n = x
			case string:
				s = x
			}
		}
		return code, n, s, nil
	}
	return 0, 0, "", fmt.Errorf("lock: unexpected reply %v from the hand-off script", r)
}

// releaseHandoff releases a lock obtained with a Retry: deletes it, or
// hands it to the first live waiter. done is false when the script could
// not run (refused): the caller then releases the plain way.
func (c *Client) releaseHandoff(ctx context.Context, hk handoffKeys, value string) (ok, done bool, err error) {
	want, mode := value, ""
	if len(value) > c.threshold {
		want, mode = redisx.SHA1Hex(value), "sha1"
	}
	code, _, perr, err := c.handoffReply(ctx, hk, "r", want, mode)
	if err != nil {
		if scriptUnusable(err) {
			c.handoffRefused(err.Error(), redisx.IsNoPerm(err))
			return false, false, nil
		}
		return false, true, err
	}
	c.handoffWorks()
	c.publishRefused(perr)
	return code > 0, true, nil
}

// waitResult is what one wait step found.
type waitResult uint8

const (
	waitQueued waitResult = iota // held by another; queued
	waitTook                     // found free and taken
	waitHanded                   // had been handed to this waiter
)

// waitStep makes one attempt of a queued waiter: take the lock if it is
// free and nobody live waits ahead, claim it if it was handed here, or
// join or refresh the queue with an entry living life. A waiter that
// cannot hear a hand-off yet (wakerListen: the probe does not know the
// channel's mode, or the subscription in it is not confirmed) only takes
// the lock if it is free, the plain way, and stays out of the queue
// (waitQueued then means held by another, not queued); it is woken for
// its next step.
func (c *Client) waitStep(ctx context.Context, hk handoffKeys, value, token string, ttl time.Duration, fencing bool, life time.Duration) (waitResult, int64, error) {
	if !c.wakerListen(ctx, hk.channel, token) {
		if err := ctx.Err(); err != nil {
			return waitQueued, 0, err // no attempt on an ended context
		}
		fenceKey := ""
		if fencing {
			fenceKey = hk.keys[3]
		}
		fence, ok, err := c.try(ctx, hk.keys[0], fenceKey, value, ttl)
		if ok {
			return waitTook, fence, nil
		}
		return waitQueued, 0, err
	}
	f := "0"
	if fencing {
		f = "1"
	}
	code, n, perr, err := c.handoffReply(ctx, hk, "w", value, token, ttl.Milliseconds(), f, life.Milliseconds())
	if err != nil {
		return waitQueued, 0, err
	}
	if code == 0 {
		c.publishRefused(perr)
	}
	return waitResult(code), n, nil
}

// leave takes a waiter that gives up out of the queue and, if the lock was
// handed to it meanwhile, releases it (handing it on). It runs on a
// context of its own: a cancelled caller must still leave. An error leaves
// the entry to expire, and a lock handed meanwhile expires with it.
func (c *Client) leave(ctx context.Context, hk handoffKeys, value, token string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	code, _, perr, err := c.handoffReply(ctx, hk, "l", value, token)
	if err != nil {
		c.serverError(ctx, "leave queue", hk.keys[0], err)
		return
	}
	if code == 2 {
		c.publishRefused(perr)
	}
}
