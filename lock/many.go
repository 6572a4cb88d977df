package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/internal/lockvalue"
	"github.com/hotkv/stampede/internal/redisx"
)

// Attempt is one key's result of ObtainMany: the lock taken (Lock), or
// what the key held where another was first (Held), or why the server
// could not say (Err). Exactly one of the three is set.
type Attempt struct {
	Lock *Lock
	// Held is what the key held when the attempt found it taken, as the
	// server returned it: another holder's lock value (read its token
	// with ParseHeld), or any other value stored under the key.
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
// error wrapping ErrInvalid before any server call; a ctx that has ended
// makes no attempt and returns its error. The server must have SET with
// both NX and GET (Redis and Valkey >= 7.0).
//
// Each lock taken is reported as Obtain reports one (EventObtained), each
// key found taken as EventNotObtained.
func (c *Client) ObtainMany(ctx context.Context, keys []string, ttl time.Duration) ([]Attempt, error) {
	for i, k := range keys {
		if k == "" {
			return nil, invalid("empty key at index %d of ObtainMany", i)
		}
	}
	if ttl < time.Millisecond {
		return nil, invalid("ttl %v for ObtainMany is below 1ms", ttl)
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
