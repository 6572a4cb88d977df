package redisx

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// CondSet is one conditional write of SetIfEqualMany: Key becomes Next,
// expiring after TTL (KeepTTL: when Old would have), if it holds Old.
type CondSet struct {
	Key, Old, Next string
	TTL            time.Duration
}

// SetIfEqualMany is SetIfEqual for each of ops, ok[i] and errs[i] being
// ops[i]'s: the writes the server takes natively (SET … IFEQ, or IFDEQ
// for a large Old) go out in one pipeline (one per node on a Cluster);
// the others (a server without them, one that refuses them, whose first
// refusal downgrades as in SetIfEqual) one at a time, as SetIfEqual
// sends them.
func (cn *Conn) SetIfEqualMany(ctx context.Context, ops []CondSet) (ok []bool, errs []error) {
	ok, errs = make([]bool, len(ops)), make([]error, len(ops))
	if len(ops) == 0 {
		return ok, errs
	}
	caps, err := cn.CapabilitiesFor(ctx, ops[0].Key)
	if err != nil {
		for i := range errs {
			errs[i] = err
		}
		return ok, errs
	}
	pipe := cn.c.Pipeline()
	cmds := make([]*redis.Cmd, len(ops))
	for i, op := range ops {
		exp, _, ok := expiry(op.TTL)
		switch {
		case !ok:
		case cn.large(op.Old) && caps.Digest == DigestNative:
			cmds[i] = pipe.Do(ctx, append([]any{"SET", op.Key, op.Next, "IFDEQ", Digest(op.Old)}, exp...)...)
		case !cn.large(op.Old) && caps.Extend == ExtendSetIfEq:
			cmds[i] = pipe.Do(ctx, append([]any{"SET", op.Key, op.Next, "IFEQ", op.Old}, exp...)...)
		}
	}
	if pipe.Len() > 0 {
		_ = Exec(ctx, pipe) // a failed pipeline's error is on every command
	}
	for i, op := range ops {
		if cmd := cmds[i]; cmd != nil {
			err := cmd.Err()
			switch {
			case err == nil:
				ok[i] = true
				continue
			case IsNil(err):
				continue
			case !IsRefused(err):
				errs[i] = Denied("conditional write", err, "")
				continue
			}
		}
		// Not sent, or refused: the one-at-a-time form downgrades and
		// takes the script.
		ok[i], errs[i] = cn.SetIfEqual(ctx, op.Key, op.Old, op.Next, op.TTL)
	}
	return ok, errs
}
