package lock

import "time"

// QueueKey and HandoffChannel are the wait queue's key and the hand-off
// channel of the lock on key, for the tests that look at them.
var (
	QueueKey       = queueKey
	HandoffChannel = handoffChannel
)

// SetRecheck sets how long c keeps a refusal by the server before it asks
// again (redisx.Recheck by default).
func SetRecheck(c *Client, d time.Duration) {
	c.conn.SetRecheck(d)
	c.sharded.Recheck = d
}
