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

// SemArmed returns how many Acquires of c wait for the semaphore s
// such that only a release's notice or their poll lets them in: they
// listen for releases, the server confirmed the subscription, and they
// made an attempt since.
func SemArmed(c *Client, s *Semaphore) int {
	w := &c.waker
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, sw := range w.sems[s.channel] {
		if sw.armed {
			n++
		}
	}
	return n
}
