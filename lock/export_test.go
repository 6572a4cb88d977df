package lock

import "time"

// SetRecheck sets how long c keeps a refusal by the server before it asks
// again (redisx.Recheck by default).
func SetRecheck(c *Client, d time.Duration) {
	c.conn.SetRecheck(d)
	c.sharded.Recheck = d
}
