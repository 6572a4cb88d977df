package middleware

import (
	"testing"
	"time"
)

// TestBypass_noStore: a request's no-store, in any letter case and in
// any of its Cache-Control fields, bypasses the cache.
func TestBypass_noStore(t *testing.T) {
	m := &Middleware{}
	for _, tt := range []struct {
		name   string
		fields []string
		want   string
	}{
		{"none", nil, ""},
		{"max-age", []string{"max-age=0"}, ""},
		{"no-store", []string{"no-store"}, "no-store"},
		{"upper case, second field", []string{"max-age=0", "No-STORE"}, "no-store"},
		{"in a list", []string{"max-age=0, NO-STORE, no-cache"}, "no-store"},
		{"cut short", []string{"no-stor", "e"}, ""},
		{"not ASCII", []string{"no-ſtore"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := fuzzRequest("/x", "h")
			r.Header["Cache-Control"] = tt.fields
			if got := m.bypass(r); got != tt.want {
				t.Errorf("bypass = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestCacheStatus_ttl: the ttl is the remaining freshness in whole
// seconds, rounded down: negative from the first millisecond past it,
// and none for a response that is never fresh (no-cache).
func TestCacheStatus_ttl(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	for _, tt := range []struct {
		fresh time.Duration
		want  string
	}{
		{1500 * time.Millisecond, "stampede; hit; ttl=1"},
		{999 * time.Millisecond, "stampede; hit; ttl=0"},
		{0, "stampede; hit; ttl=0"},
		{-time.Millisecond, "stampede; hit; ttl=-1"},
		{-1000 * time.Millisecond, "stampede; hit; ttl=-1"},
		{-1001 * time.Millisecond, "stampede; hit; ttl=-2"},
	} {
		resp := &response{Stored: now.Add(-time.Hour).UnixMilli(), FreshUntil: now.Add(tt.fresh).UnixMilli()}
		if got := statusHit.cacheStatus(resp, now); got != tt.want {
			t.Errorf("fresh for %v: %q, want %q", tt.fresh, got, tt.want)
		}
	}
	never := &response{Stored: now.UnixMilli(), FreshUntil: now.UnixMilli()}
	if got := missStatus("stale", 304, true).cacheStatus(never, now); got != "stampede; fwd=stale; fwd-status=304; stored" {
		t.Errorf("a no-cache response: %q", got)
	}
}
