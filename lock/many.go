package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/failpoint"
	"github.com/hotkv/stampede/internal/lockvalue"
	"github.com/hotkv/stampede/internal/redisx"
)

// Attempt is one key's result of ObtainMany: the lock taken (Lock set),
// or the key found taken by another (Lock and Err nil; Held says what it
// held), or why the server could not say (Err set).
type Attempt struct {
	Lock *Lock
	// Held is what the key held when the attempt found it taken, as the
	// server returned it: another holder's lock value (Inspect reads one
	// apart), or any other value stored under the key.
	Held string
	Err  error
}

// ObtainMany makes one attempt at the lock on each of keys, for ttl, as
// Obtain with no option does, and returns one Attempt per key in keys'
// order. The attempts go out together: one SET NX PX GET per key, in one
// pipeline (one per node on a Redis Cluster), or, for one key, with the
// concurrent calls of the Client. Where a key is taken, the reply says
// what it holds, so a caller that waits for the holder need not read the
// key again.
//
// A key of keys that another process holds is no error: its Attempt has
// Held set. A failed or refused server call is that key's Err (wrapping
// ErrPermission where the ACL refused it, or where the server refuses the
// scripts that releasing the lock would need: no lock is then taken that
// could not be released). An empty key or a ttl below 1ms returns an
// error matching ErrInvalid before any server call; a ctx that has ended
// makes no attempt and returns its error. The server must have SET with
// both NX and GET (Redis and Valkey >= 7.0).
//
// Each lock taken is reported as Obtain reports one (EventObtained), each
// key found taken as EventNotObtained.
func (c *Client) ObtainMany(ctx context.Context, keys []string, ttl time.Duration) ([]Attempt, error) {
	for i, k := range keys {
		if k == "" {
			return nil, invalid("ObtainMany keys[%d] is empty", i)
		}
	}
	if ttl < time.Millisecond {
		return nil, invalid("ObtainMany ttl %v is below 1ms", ttl)
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(ErrNotObtained, err)
	}
	out := make([]Attempt, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	start := time.Now()
	token := make([]string, len(keys))
	value := make([]string, len(keys))
	cmds := make([]*redis.Cmd, len(keys))
	var pipe redis.Pipeliner
	if len(keys) > 1 {
		pipe = c.conn.Client().Pipeline()
	}
	for i, k := range keys {
		token[i] = lockvalue.NewToken()
		value[i] = lockvalue.Encode(token[i], start, "")
		if err := c.permitted(ctx, k, value[i], false); err != nil {
			out[i].Err = fmt.Errorf("lock: obtain %q: %w", k, err)
			continue
		}
		args := []any{"SET", k, value[i], "PX", ttl.Milliseconds(), "NX", "GET"}
		if pipe == nil {
			cmds[i] = c.conn.Send(ctx, args...)
		} else {
			cmds[i] = pipe.Do(ctx, args...)
		}
	}
	if pipe != nil && pipe.Len() > 0 {
		_ = redisx.Exec(ctx, pipe) // a failed pipeline's error is on every command
	}
	for i, k := range keys {
		if cmds[i] == nil {
			c.emit(ctx, EventObtainFailed, k, time.Since(start), out[i].Err)
			continue
		}
		held, err := cmds[i].Text()
		switch {
		case redisx.IsNil(err): // nothing was there: taken
			out[i].Lock = &Lock{c: c, key: k, value: value[i], token: token[i], sent: start}
			c.emit(ctx, EventObtained, k, time.Since(start), nil)
		case err == nil:
			out[i].Held = held
			c.emit(ctx, EventNotObtained, k, time.Since(start), ErrNotObtained)
		default:
			out[i].Err = fmt.Errorf("lock: obtain %q: %w", k, redisx.Denied("obtain", err, ""))
			c.serverError(ctx, "obtain", k, out[i].Err)
			c.emit(ctx, EventObtainFailed, k, time.Since(start), out[i].Err)
		}
	}
	return out, nil
}

// Replacement is one Replace of ReplaceMany: Lock is replaced by Value,
// expiring after TTL.
type Replacement struct {
	Lock  *Lock
	Value string
	TTL   time.Duration
}

// ReplaceMany is Lock.Replace for each of rs, together: where the server
// has SET … IFEQ the writes go out in one pipeline (one per node on a
// Redis Cluster), the others one at a time as Replace sends them. errs[i]
// is rs[i]'s: nil, ErrNotHeld (the key no longer holds that acquisition;
// nothing changed), a failed server call, or ErrInvalid (a TTL below 1ms,
// or a lock of another Client). Each is reported as Replace reports one.
func (c *Client) ReplaceMany(ctx context.Context, rs []Replacement) (errs []error) {
	errs = make([]error, len(rs))
	ops := make([]redisx.CondSet, 0, len(rs))
	idx := make([]int, 0, len(rs))
	for i, r := range rs {
		switch {
		case r.Lock == nil:
			errs[i] = invalid("ReplaceMany rs[%d].Lock is nil", i)
		case r.Lock.c != c:
			errs[i] = invalid("ReplaceMany rs[%d].Lock (key %q) is a lock of another Client", i, r.Lock.key)
		case r.TTL < time.Millisecond:
			errs[i] = invalid("ReplaceMany rs[%d].TTL %v for key %q is below 1ms", i, r.TTL, r.Lock.key)
		default:
			ops = append(ops, redisx.CondSet{Key: r.Lock.key, Old: r.Lock.value, Next: r.Value, TTL: r.TTL})
			idx = append(idx, i)
		}
	}
	ok, cerrs := c.conn.SetIfEqualMany(ctx, ops)
	for j, i := range idx {
		errs[i] = rs[i].Lock.replaced(ctx, ok[j], cerrs[j])
	}
	return errs
}

// KeepAliveMany keeps locks (of c) alive together, as KeepAlive keeps one:
// every interval (a third of ttl when interval is 0 or not below ttl) one
// pipeline sets each lock still held back to ttl, the first round timed
// from the earliest obtain, each later one from the send of the previous
// one, until stop is called; the locks must have been obtained with ttl.
// stop waits for a round in flight. A lock found taken or expired is not
// refreshed again, and a failed round is tried again at the next. There
// is no context to cancel on a loss: the Replace or Release that follows
// finds the lock gone (ErrNotHeld). Each refresh is reported to
// Options.Observer as KeepAlive's are, from the keep-alive's own
// goroutine.
func (c *Client) KeepAliveMany(ctx context.Context, ttl, interval time.Duration, locks []*Lock) (stop func()) {
	if len(locks) == 0 {
		return func() {}
	}
	if interval <= 0 || interval >= ttl {
		interval = max(ttl/3, time.Millisecond)
	}
	held := make([]*Lock, 0, len(locks))
	first := time.Now() // the earliest obtain of held: the first round is due interval after it
	for _, l := range locks {
		if l != nil && l.c == c {
			held = append(held, l)
			if l.sent.Before(first) {
				first = l.sent
			}
		}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTimer(max(0, interval-time.Since(first)))
		defer t.Stop()
		for len(held) > 0 {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			sent := time.Now()
			held = c.refreshAll(ctx, held, ttl)
			t.Reset(max(0, interval-time.Since(sent)))
		}
	}()
	return func() {
		select {
		case <-quit:
		default:
			close(quit)
		}
		<-done
	}
}

// refreshAll sets each of held back to ttl in one pipeline and returns
// those still held (a failed refresh keeps its lock for the next round).
func (c *Client) refreshAll(ctx context.Context, held []*Lock, ttl time.Duration) []*Lock {
	failpoint.Inject(ctx, failpoint.LockRefresh)
	ops := make([]redisx.CondSet, len(held))
	for i, l := range held {
		ops[i] = redisx.CondSet{Key: l.key, Old: l.value, Next: l.value, TTL: ttl}
	}
	ok, errs := c.conn.SetIfEqualMany(ctx, ops)
	kept := held[:0]
	for i, l := range held {
		switch {
		case errs[i] != nil:
			c.emitOwned(EventRefreshFailed, l.key, time.Since(l.sent), fmt.Errorf("lock: refresh %q: %w", l.key, errs[i]))
			kept = append(kept, l)
		case !ok[i]:
			c.emitOwned(EventRefreshFailed, l.key, time.Since(l.sent), ErrNotHeld)
		default:
			c.emitOwned(EventRefreshed, l.key, time.Since(l.sent), nil)
			kept = append(kept, l)
		}
	}
	return kept
}
