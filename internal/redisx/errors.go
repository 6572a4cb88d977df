package redisx

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// IsNil reports whether err is go-redis's "no such key" reply. It is the
// only place in stampede that reads redis.Nil.
func IsNil(err error) bool { return errors.Is(err, redis.Nil) }

// IsReply reports whether err is an error reply from the server (as opposed
// to a network, timeout or client error). redis.Nil is not a reply error.
func IsReply(err error) bool {
	var re redis.Error
	return err != nil && !IsNil(err) && errors.As(err, &re)
}

// IsUnknownCommand reports whether the server refused the command itself.
// Only the prefix is common to Redis, Valkey, Dragonfly and proxies; the
// rest of the message differs.
func IsUnknownCommand(err error) bool {
	return IsReply(err) && strings.HasPrefix(err.Error(), "ERR unknown command")
}

// IsRefused reports whether the server refused a command or one of its
// arguments (unknown command, syntax error, unknown option): the signal to
// fall back to an older form of the same operation.
func IsRefused(err error) bool {
	if !IsReply(err) {
		return false
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "ERR unknown command") ||
		strings.HasPrefix(msg, "ERR syntax error") ||
		strings.HasPrefix(msg, "ERR unknown subcommand") ||
		strings.HasPrefix(msg, "ERR Unsupported") ||
		strings.HasPrefix(msg, "ERR unsupported")
}

// IsTransport reports whether err says the server could not be reached or
// the connection broke (refused, reset, closed, timed out, no connection
// free in the pool), as opposed to an error reply, a cancelled context or
// a client-side mistake.
//
// NOTE: context.DeadlineExceeded satisfies net.Error (a timeout), but it is
// the end of a caller's context, not a server failure, and is never
// reported as one; nor is context.Canceled. A read or write timeout of the
// connection is. With go-redis's ContextTimeoutEnabled, a caller's deadline
// also reaches the connection and then fails it with a timeout that is not
// a context error: callers must check their ctx as well (see CallerDone).
func IsTransport(err error) bool {
	if err == nil || IsNil(err) || IsReply(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, redis.ErrPoolTimeout)
}

// ReplyKind returns the first word of the server's error reply in err
// ("BUSY", "OOM", "NOPERM", "ERR", ...), or "" when err carries none.
func ReplyKind(err error) string {
	var re redis.Error
	if !IsReply(err) || !errors.As(err, &re) {
		return ""
	}
	msg := re.Error()
	if i := strings.IndexByte(msg, ' '); i > 0 {
		return msg[:i]
	}
	return msg
}

// IsNotRESP reports whether err says the server's answer was not in the
// Redis protocol: the address is not a Redis server's (an HTTP server
// answered, say), or something in between garbles the stream. go-redis
// words it "redis: can't parse ..." or "redis: invalid reply ...".
func IsNotRESP(err error) bool {
	if err == nil || IsReply(err) {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "redis: can't parse") || strings.Contains(msg, "redis: invalid reply")
}

// CallerDone reports whether a call made with ctx ended because of ctx:
// it is cancelled, or its deadline has passed even if ctx.Err() does not
// say so yet. (The connection's deadline, set from ctx's by go-redis's
// ContextTimeoutEnabled, and ctx's own timer are separate timers; the
// connection's may fire first.) An error from such a call says nothing
// about the server.
func CallerDone(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}
