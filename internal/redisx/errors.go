package redisx

import (
	"errors"
	"strings"

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
