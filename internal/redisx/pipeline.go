package redisx

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Exec sends pipe's commands and returns the error that failed the
// pipeline as a whole, after setting it on every command: code that reads
// each command's Err then sees the failure, not an empty reply. It returns
// nil when the commands carry their own outcomes (replies, misses, error
// replies); read those from the commands. An error that every command
// carries (a transport error, or a cluster node's connection failure,
// which go-redis sets on each) is returned as well.
//
// go-redis returns a failure to set up the connection that the pipeline
// was to use (a wrong password: WRONGPASS; a database that does not
// exist: ERR DB index is out of range; an error from OnConnect) from Exec
// alone and leaves every command without an error and without a value.
// Such a failure is an error reply, but not to any of the commands: it
// says nothing of what the server offers, and no caller may take it as
// their answer.
func Exec(ctx context.Context, pipe redis.Pipeliner) error {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return nil
	}
	carried := 0
	for _, cmd := range cmds {
		if errors.Is(cmd.Err(), err) {
			carried++
		}
	}
	switch carried {
	case 0:
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
	case len(cmds):
	default:
		return nil // the commands' own outcomes (Exec returns the first error)
	}
	return err
}
