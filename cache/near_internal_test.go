package cache

import (
	"math"
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

// fill puts e in n under tag as a read's fill does.
func fill(n *nearCache, tag string, e *nearEntry) {
	n.finish(n.begin(tag), e)
}

// A plain key is looked up under itself before its tag is computed; an
// entry found there is its own only if it was filled for a plain key. A
// key that is not plain may spell the name of a tag record ("tag ...")
// or of another key's hash ("#..."): it must not be served their entries.
func TestNearLookupKey_onlyPlainEntriesByName(t *testing.T) {
	n := newNearCache(&Near{MaxEntries: 10, Lease: time.Minute}, "ns")
	defer n.close()
	now := time.Now().UnixNano()
	n.trusted.Store(now + int64(time.Minute))
	entry := func(payload string) *nearEntry {
		return &nearEntry{e: codec.Entry{Payload: []byte(payload)}, until: now + int64(time.Hour)}
	}
	hashed := "a{b}" // not plain: kept under its hash
	fill(n, "k", entry("k's"))
	fill(n, recordTag("foo"), entry("foo's record"))
	fill(n, tagOf(hashed), entry("a{b}'s"))

	for _, tc := range []struct{ key, want string }{
		{"k", "k's"},
		{hashed, "a{b}'s"},
		{recordTag("foo"), ""}, // a key that spells a record's name
		{tagOf(hashed), ""},    // a key that spells another key's hash
		{"absent", ""},
	} {
		got := ""
		if e := n.lookupKey(tc.key, now); e != nil {
			got = string(e.e.Payload)
		}
		if got != tc.want {
			t.Errorf("lookupKey(%q) found %q, want %q", tc.key, got, tc.want)
		}
	}
}

// plainFresh, which lets a near hit skip decideEntry, is set only for a
// value without tags, and in range whatever time the entry's bytes hold.
func TestNearFinish_plainFresh(t *testing.T) {
	n := newNearCache(&Near{MaxEntries: 10}, "ns")
	defer n.close()
	fresh := time.UnixMilli(1_900_000_000_000)
	for _, tc := range []struct {
		name string
		e    codec.Entry
		want int64
	}{
		{"value", codec.Entry{FreshUntil: fresh}, fresh.UnixNano()},
		{"not found", codec.Entry{FreshUntil: fresh, NotFound: true}, 0},
		{"tagged", codec.Entry{FreshUntil: fresh, Tags: []codec.TagRef{{Name: "t"}}}, 0},
		{"before 1970", codec.Entry{FreshUntil: time.UnixMilli(-1 << 60)}, 0},
		{"after 2262", codec.Entry{FreshUntil: time.UnixMilli(1 << 60)}, math.MaxInt64},
	} {
		e := &nearEntry{e: tc.e}
		fill(n, "k", e)
		if e.plainFresh != tc.want {
			t.Errorf("%s: plainFresh %d, want %d", tc.name, e.plainFresh, tc.want)
		}
	}
}
