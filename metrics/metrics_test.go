package metrics

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/middleware"
)

// Past max routes, new routes share the series of OtherRoute; admitted
// routes keep their own, and each key's series is made once.
func TestRoutes_Series_overflow(t *testing.T) {
	made := map[RouteKey]int{}
	r := NewRoutes(2, func(k RouteKey) *RouteKey {
		made[k]++
		return &k
	})
	ev := func(route string) middleware.Event {
		return middleware.Event{Kind: middleware.EventHit, Route: route}
	}
	tests := []struct {
		name, route, want string
	}{
		{"first", "/a", "/a"},
		{"second", "/b", "/b"},
		{"third overflows", "/c", OtherRoute},
		{"first again", "/a", "/a"},
		{"fourth overflows", "/d", OtherRoute},
		{"literal other", OtherRoute, OtherRoute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Series(ev(tt.route)).Route; got != tt.want {
				t.Errorf("Series(%q).Route = %q, want %q", tt.route, got, tt.want)
			}
		})
	}
	for k, n := range made {
		if n != 1 {
			t.Errorf("series of %+v made %d times, want 1", k, n)
		}
	}
	if len(made) != 3 {
		t.Errorf("%d series made, want 3 (/a, /b, other)", len(made))
	}
}

// Methods and status codes are bounded too: every method the client may
// make up shares the series of "_OTHER", a status outside 100-599 that of
// 0; known ones have their own.
func TestRoutes_Series_methodAndStatus(t *testing.T) {
	made := 0
	r := NewRoutes(10, func(k RouteKey) *RouteKey {
		made++
		return &k
	})
	tests := []struct {
		name, method string
		status       int
		wantMethod   string
		wantStatus   int
	}{
		{"known", "GET", 200, "GET", 200},
		{"patch", "PATCH", 204, "PATCH", 204},
		{"made up", "FOO", 200, "_OTHER", 200},
		{"made up too", "get", 200, "_OTHER", 200},
		{"no status", "GET", 0, "GET", 0},
		{"not a status", "GET", 1000, "GET", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := r.Series(middleware.Event{Kind: middleware.EventHit, Route: "/a", Method: tt.method, Status: tt.status})
			if k.Method != tt.wantMethod || k.Status != tt.wantStatus {
				t.Errorf("Series(%q, %d) = %q, %d; want %q, %d", tt.method, tt.status, k.Method, k.Status, tt.wantMethod, tt.wantStatus)
			}
		})
	}
	if made != 4 { // GET 200, PATCH 204, _OTHER 200, GET 0
		t.Errorf("%d series made, want 4", made)
	}
}

// Every kind is reported (zeros included), tiered kinds once per tier,
// and kinds without a name under kind 0 once counted.
func TestEvents_Each(t *testing.T) {
	tb := NewEvents(cache.EventHit, cache.EventStale)
	got := func() map[string]uint64 {
		m := map[string]uint64{}
		tb.Each(func(k cache.EventKind, tier Tier, n uint64) {
			m[strings.TrimSuffix(k.String()+"/"+tier.String(), "/")] = n
		})
		return m
	}
	before := got()
	if _, ok := before["unknown"]; ok {
		t.Errorf("unknown kinds reported before any was counted: %v", before)
	}
	for _, k := range []string{"hit/server", "hit/near", "stale/server", "stale/near", "miss", "load"} {
		if n, ok := before[k]; !ok || n != 0 {
			t.Errorf("%s = %d, %v; want 0, reported", k, n, ok)
		}
	}
	tb.Count(cache.EventHit, true)
	tb.Count(cache.EventHit, false)
	tb.Count(cache.EventStale, true)
	tb.Count(cache.EventMiss, true) // near ignored without tiers
	tb.Count(200, false)
	tb.Count(0, false)
	after := got()
	want := map[string]uint64{"hit/server": 1, "hit/near": 1, "stale/server": 0, "stale/near": 1, "miss": 1, "load": 0, "unknown": 2}
	for k, n := range want {
		if after[k] != n {
			t.Errorf("%s = %d, want %d (all: %v)", k, after[k], n, after)
		}
	}
	if len(after) != len(before)+1 {
		t.Errorf("%d series after counting, want %d", len(after), len(before)+1)
	}
}

// Prometheus and OpenTelemetry names are derived from Name; a name must
// be dotted lower-case words so that both derivations hold.
func TestStatsFields(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range StatsFields() {
		if f.Name == "" || strings.Trim(f.Name, "abcdefghijklmnopqrstuvwxyz_.") != "" || seen[f.Name] {
			t.Errorf("bad or repeated name %q", f.Name)
		}
		seen[f.Name] = true
		if f.Help == "" || f.Value == nil {
			t.Errorf("%s: no help or no getter", f.Name)
		}
	}
	s := cache.Stats{Coalesced: 1, Served: 2, Waits: 3, LockContention: 4, AnnounceDenied: 5, NearInvalidations: 6, NearFlushes: 7, NearEntries: 8, BackendWaits: 9}
	for i, f := range StatsFields() {
		if got := f.Value(s); got != uint64(i+1) {
			t.Errorf("%s reads %d, want %d", f.Name, got, i+1)
		}
	}
}

func TestLoadResult_WaitResult(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name       string
		err        error
		load, wait string
	}{
		{"nil", nil, "ok", "ok"},
		{"not found", fmt.Errorf("x: %w", loader.ErrNotFound), "not-found", "error"},
		{"wait timeout", fmt.Errorf("x: %w", cache.ErrWaitTimeout), "error", "timeout"},
		{"other", boom, "error", "error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := LoadResults()[LoadResult(tt.err)]; got != tt.load {
				t.Errorf("load result %q, want %q", got, tt.load)
			}
			if got := WaitResults()[WaitResult(tt.err)]; got != tt.wait {
				t.Errorf("wait result %q, want %q", got, tt.wait)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name      string
		buckets   []float64
		maxRoutes int
		want      string // "" for no error
	}{
		{"defaults", nil, 0, ""},
		{"set", []float64{.1, 1}, 5, ""},
		{"negative MaxRoutes", nil, -1, "MaxRoutes is -1, must not be negative"},
		{"buckets not increasing", []float64{1, 1}, 0, "Buckets must be in increasing order"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.buckets, tt.maxRoutes)
			if got := fmt.Sprint(err); (err == nil) != (tt.want == "") || (err != nil && got != tt.want) {
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	if n := len(DefaultBuckets()); n != 14 {
		t.Errorf("%d default buckets, want 14", n)
	}
	if err := Validate(DefaultBuckets(), DefaultMaxRoutes); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}
