package lock

import (
	"context"

	"github.com/hotkv/stampede/internal/redisx"
)

// permitted returns ErrPermission (a *redisx.PermissionError) when a lock
// holding value on key could not be released or refreshed on this server,
// or not obtained with fencing, because the server refuses the scripts
// that would need; nil otherwise, and the probe's error when the server
// could not be asked. Obtain checks before its first attempt, so that a
// refusal leaves no lock behind that only its TTL would end.
func (c *Client) permitted(ctx context.Context, key, value string, fencing bool) error {
	if fencing {
		if err := c.conn.CheckScripts(ctx, key, "fenced obtain (script: SET NX and INCR in one step)", ""); err != nil {
			return err
		}
	}
	if err := c.conn.Check(ctx, key, redisx.OpRelease, len(value)); err != nil {
		return err
	}
	return c.conn.Check(ctx, key, redisx.OpExtend, len(value))
}
