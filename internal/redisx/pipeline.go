package redisx

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Exec sends pipe's commands and returns the error that failed the
// pipeline as a whole, after setting it on every command: code that reads
// each command's Err then sees the failure, not an empty reply. It returns
// nil when every command carries its own outcome (a reply, a miss, an
// error reply, or a transport error go-redis set on it); read those from
// the commands.
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
	for _, cmd := range cmds {
		if errors.Is(cmd.Err(), err) {
			return nil // a command's own outcome (Exec returns the first)
		}
	}
	for _, cmd := range cmds {
		cmd.SetErr(err)
	}
	return err
}
