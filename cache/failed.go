package cache

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/codec"
	"github.com/hotkv/stampede/internal/redisx"
)

// A failed rebuild's outcome outlives its announcement. An announcement
// reaches the processes subscribed when it is published; a waiter whose
// subscription the server confirms later reads the key again (see
// Cache.await), and a write is found by that read, but a failure is never
// stored: the read would find the key free, and the waiter would claim it
// and run its own loader against the failing backend. So a rebuild whose
// loader failed writes a marker naming its claim's token and carrying the
// error text (codec.EncodeFailure) to the entry's marker key,
// NS:{tag}:fail, for failureTTL, in the pipeline of its announcement and
// before it frees its claim (or rebuild lock). A waiter that saw that
// claim and then finds the key free (or its unusable bytes still there,
// the rebuild lock free) reads the marker before claiming (claimAfter):
// the marker is there, since the claim was freed after it was written,
// and it names a claim the waiter saw, so the waiter's answer is that
// failure, ErrRemoteLoad with its text, exactly as the announcement
// would have told it (Cache.heard).
//
// The marker is a key of its own, beside the entry, rather than the
// claim turned into a marker in place: nobody but such a waiter ever
// reads it, so the value key's states, and every reader, writer, the
// near cache and processes of older versions, are as they were; a caller
// that did not see the claim finds the key free and claims it as before,
// and a Set or Delete meanwhile stands, as the waiter reads the value key
// first. A marker is overwritten by the next failed rebuild of the key: a
// waiter that saw only the first, and reads after the second failed,
// claims the key as before the marker.

// failureTTL is how long a failed rebuild's marker stays, for a Cache
// whose waiters read the key every poll: a waiter reads the key at most a
// poll interval after the failure (its poll, or sooner: its
// subscription's confirmation), then waits at most settleBound (at most
// max(poll, settleMin)) for the announcements on their way before it reads
// the marker: 2*poll + settleMin covers that (650ms by default), and a
// second at least leaves room for a stalled waiter on a busy machine. A
// marker costs only its memory and is read only by those waiters, so a
// longer one harms nobody; failureMax bounds what a Cache with a very
// long poll leaves behind (its waiters are sent to read by their
// subscription's confirmation, soon after the failure, not by the poll).
func failureTTL(poll time.Duration) time.Duration {
	return min(max(2*poll+settleMin, failureMin), failureMax)
}

const (
	failureMin = time.Second
	failureMax = 5 * time.Second
)

// queueFailure queues on pipe the marker of the rebuild of k holding the
// claim token, whose loader failed with text.
func (c *Cache) queueFailure(ctx context.Context, pipe redis.Pipeliner, k keys, token, text string) *redis.StatusCmd {
	return pipe.Set(ctx, k.failed(), codec.EncodeFailure(token, text), failureTTL(c.s.poll))
}

// failureWritten reports the marker's write of k that returned err, in a
// pipeline that failed as a whole with whole (reported with the
// announcement's error instead). A refused write (an ACL narrower than
// the namespace's keys) is counted and logged as a server error: the
// rebuild's waiters are told by the announcement alone, as before the
// marker.
func (c *Cache) failureWritten(k keys, err, whole error) {
	if err != nil && whole == nil {
		c.serverError(k.user, err)
	}
}

// failedBefore reads k's failure marker for a waiter that saw the claims
// of wt, and has found the key free (or the rebuild lock of its unusable
// bytes free): the marker of one of those claims is the waiter's answer
// (Cache.heard). Anything else (no marker, another claim's, one of a
// version this one cannot read, a failed read) sends it on to claim the
// key, as before the marker; a failed read meets the same server again
// there.
func (c *Cache) failedBefore(ctx context.Context, k keys, wt *watch) verdict {
	raw, err := c.rc.Get(ctx, k.failed()).Bytes()
	switch {
	case redisx.IsNil(err):
		return verdict{next: readAgain}
	case err != nil:
		if !redisx.IsTransport(err) && !redisx.CallerDone(ctx) {
			c.serverError(k.user, err) // a refusal: counted and logged
		}
		return verdict{next: readAgain}
	}
	token, text, ok := codec.DecodeFailure(raw)
	if !ok {
		return verdict{next: readAgain}
	}
	return c.heard(ctx, k, notice{kind: noticeError, token: token, text: text}, wt)
}
