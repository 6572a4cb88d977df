package redisx

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Publication is the message SetIfEqualPublish publishes once it wrote.
type Publication struct {
	Channel string
	Message string
	Sharded bool // SPUBLISH; PUBLISH otherwise
}

// ErrNotCombined is returned by SetIfEqualPublish, which then wrote and
// published nothing, where the write and the publish cannot be one script:
// the server refuses scripts to the client's user (as the ACL last said:
// a remembered refusal is re-checked with the capabilities, see Recheck),
// or refused this one (scripting disabled, a proxy without EVALSHA), or,
// on a client that spreads keys over servers, the channel is not in the
// key's slot. The caller writes and publishes in two steps instead.
var ErrNotCombined = errors.New("redisx: the write and the publish cannot be one script here")

// SetIfEqualPublish is SetIfEqual (a ttl, not KeepTTL) that, in the same
// script and only if it wrote, publishes pub: a subscriber hears of the
// value exactly when it was stored, one round trip sooner than from a
// publish sent after the write's reply. It reports whether it wrote, and,
// when it wrote but the server refused the publish (the ACL, say), the
// publish's error reply as pubErr: the write stands all the same. The
// script compares as setIfEq does (by SHA-1 for a large old value); it is
// sent with the concurrent calls of this Conn.
//
// It returns ErrNotCombined, having sent nothing that wrote, where one
// script cannot do both (see there).
func (cn *Conn) SetIfEqualPublish(ctx context.Context, key, old, next string, ttl time.Duration, pub Publication) (wrote bool, pubErr, err error) {
	ms := ttl.Milliseconds()
	if ms < 1 {
		return false, nil, fmt.Errorf("redisx: set %q: ttl %v below 1ms", key, ttl)
	}
	if !cn.sameServer(key, pub.Channel) {
		return false, nil, ErrNotCombined
	}
	caps, err := cn.CapabilitiesFor(ctx, key)
	if err != nil {
		return false, nil, err
	}
	if caps.ScriptsDenied != "" {
		return false, nil, ErrNotCombined
	}
	cmd := "publish"
	if pub.Sharded {
		cmd = "spublish"
	}
	want, mode := cn.expect(old)
	res, err := cn.batchedScript(ctx, cn.scripts.setIfEqPub, []string{key}, want, mode, next, ms, pub.Channel, pub.Message, cmd).Slice()
	switch {
	case isScriptRefusal(err):
		// The ACL refuses EVALSHA or EVAL: remembered as SetIfEqual's
		// script does (scriptErr), until the next probe says otherwise.
		msg := err.Error()
		cn.downgrade(func(c *Capabilities) { c.ScriptsDenied = msg })
		return false, nil, ErrNotCombined
	case err != nil && IsRefusal(err) && !IsNoPerm(err):
		// Scripting disabled, or no EVALSHA here: this call's fact only.
		return false, nil, ErrNotCombined
	case err != nil:
		// A command of the script or its key refused (NOPERM inside it,
		// before the write), or a failure of this moment.
		return false, nil, cn.scriptErr(caps, OpSet, len(old), err)
	}
	if len(res) == 0 {
		return false, nil, fmt.Errorf("redisx: set %q: unexpected script reply %v", key, res)
	}
	n, ok := res[0].(int64)
	if !ok {
		return false, nil, fmt.Errorf("redisx: set %q: unexpected script reply %v", key, res)
	}
	if n != 1 {
		return false, nil, nil
	}
	if text, ok := res[len(res)-1].(string); ok {
		return true, replyError(text), nil
	}
	return true, nil, nil
}

// sameServer reports whether one script may touch key and publish on
// channel: on a client that spreads keys over servers (a Cluster, where a
// script's keys, and on Redis >= 7 the shard channels it publishes on,
// must be in one slot; a Ring), only if both are in one slot. Clients
// this package cannot see through are taken as spreading.
func (cn *Conn) sameServer(key, channel string) bool {
	if c, _ := unforce(cn.c, nil); isOneServer(c) {
		return true
	}
	return Slot(HashTag(key)) == Slot(HashTag(channel))
}

func isOneServer(c Client) bool {
	_, ok := c.(*redis.Client)
	return ok
}

// replyError is an error reply of the server that reached us as data (a
// script's pcall): it is matched as any reply (IsReply, IsNoPerm).
type replyError string

func (e replyError) Error() string { return string(e) }

// RedisError marks e as a server's reply (redis.Error).
func (replyError) RedisError() {}
