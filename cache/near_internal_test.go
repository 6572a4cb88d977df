package cache

import (
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/codec"
)

// The coarse clock of near hits may lag in a process short of CPU (the
// soak's strict form saw hits 3-19 ms past a 50 ms Lease). Once less
// than half the Lease is left, the system clock decides: a lagging coarse
// time must not stretch the Lease.
func TestNearLookup_leaseHeldToSystemClock(t *testing.T) {
	const lease = 100 * time.Millisecond
	n := newNearCache(&Near{MaxEntries: 10, Lease: lease}, "ns")
	defer n.close()
	n.store.Set("k", &nearEntry{e: codec.Entry{}, until: time.Now().Add(time.Hour).UnixNano()})

	now := time.Now().UnixNano()
	n.trusted.Store(now + int64(lease)) // a ping answered just now
	if n.lookup("k", now) == nil {
		t.Fatal("a trusted entry was not served")
	}
	// The lease ended 10 ms ago by the system clock; the coarse clock lags
	// 20 ms behind and still sees 10 ms of it left.
	sys := time.Now().UnixNano()
	n.trusted.Store(sys - int64(10*time.Millisecond))
	if n.lookup("k", sys-int64(20*time.Millisecond)) != nil {
		t.Fatal("served past the Lease because the coarse clock lagged")
	}
}
