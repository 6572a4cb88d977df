package redisx_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// listen subscribes to channel on rc (SSUBSCRIBE where the server has
// sharded pub/sub, SUBSCRIBE on miniredis) and returns once the server
// confirmed it; next returns the next message's payload.
func listen(tb testing.TB, ctx context.Context, s *redistest.Server, rc redis.UniversalClient, channel string) (sharded bool, next func() string) {
	tb.Helper()
	sharded = s.Kind != redistest.Miniredis
	return sharded, redistest.Subscribe(tb, ctx, rc, channel, sharded)
}

// publishMarker publishes "marker" on channel as sharded says: a
// subscriber that receives it next received nothing published before it.
func publishMarker(tb testing.TB, ctx context.Context, rc redis.UniversalClient, channel string, sharded bool) {
	tb.Helper()
	var err error
	if sharded {
		err = rc.SPublish(ctx, channel, "marker").Err()
	} else {
		err = rc.Publish(ctx, channel, "marker").Err()
	}
	if err != nil {
		tb.Fatalf("publishing the marker: %v", err)
	}
}

// TestConn_SetIfEqualPublish: the write and its publish are one script,
// which publishes exactly when it wrote: a subscriber hears the message
// when the key held the expected value (small, or compared by SHA-1), and
// nothing, with the key left as it was, when a concurrent write replaced
// it or it is gone.
func TestConn_SetIfEqualPublish(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		admin := s.Client(t)
		for _, tc := range []struct {
			name      string
			stored    string // "" for none
			old       string
			threshold int
			wrote     bool
		}{
			{name: "held", stored: "claim", old: "claim", wrote: true},
			{name: "held, compared by SHA-1", stored: "a claim longer than the threshold", old: "a claim longer than the threshold", threshold: 8, wrote: true},
			{name: "replaced by a Set", stored: "the Set's value", old: "claim"},
			{name: "replaced, compared by SHA-1", stored: "the Set's value", old: "a claim longer than the threshold", threshold: 8},
			{name: "gone", old: "claim"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := "{" + redistest.Key(t, "") + "}"
				channel := key + ":ann"
				if tc.stored != "" {
					if err := admin.Set(ctx, key, tc.stored, time.Minute).Err(); err != nil {
						t.Fatal(err)
					}
				}
				sharded, next := listen(t, ctx, s, s.Client(t), channel)
				cn := redisx.NewConn(s.Client(t), nil, tc.threshold)
				defer cn.Close()
				wrote, pubErr, err := cn.SetIfEqualPublish(ctx, key, tc.old, "value", time.Minute,
					redisx.Publication{Channel: channel, Message: "announcement", Sharded: sharded})
				if err != nil || pubErr != nil || wrote != tc.wrote {
					t.Fatalf("SetIfEqualPublish = %t, %v, %v; want %t, nil, nil", wrote, pubErr, err, tc.wrote)
				}
				publishMarker(t, ctx, admin, channel, sharded)
				want, first := tc.stored, "marker"
				if tc.wrote {
					want, first = "value", "announcement"
				}
				if got := next(); got != first {
					t.Errorf("the subscriber received %q first, want %q", got, first)
				}
				got, err := admin.Get(ctx, key).Result()
				if redisx.IsNil(err) {
					got, err = "", nil
				}
				if err != nil || got != want {
					t.Errorf("the key holds %q, %v; want %q", got, err, want)
				}
				if tc.wrote {
					if ttl, err := admin.PTTL(ctx, key).Result(); err != nil || ttl <= 0 || ttl > time.Minute {
						t.Errorf("PTTL %v, %v; want the write's minute", ttl, err)
					}
				}
			})
		}
	})
}

// TestConn_SetIfEqualPublish_otherSlot: on a Cluster a script may not
// publish on a shard channel of another slot than its key's, so a channel
// without the key's hash tag is refused before anything is sent; on one
// server any channel goes.
func TestConn_SetIfEqualPublish_otherSlot(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		admin := s.Client(t)
		key := "{" + redistest.Key(t, "") + "}"
		channel := redistest.Key(t, "elsewhere")
		if redisx.Slot(redisx.HashTag(key)) == redisx.Slot(redisx.HashTag(channel)) {
			t.Skip("the random key and channel fell in one slot")
		}
		if err := admin.Set(ctx, key, "claim", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		cn := redisx.NewConn(s.Client(t), nil, 0)
		defer cn.Close()
		wrote, _, err := cn.SetIfEqualPublish(ctx, key, "claim", "value", time.Minute,
			redisx.Publication{Channel: channel, Message: "announcement", Sharded: s.Kind != redistest.Miniredis})
		want := "value"
		if s.Kind == redistest.Cluster {
			want = "claim"
			if !errors.Is(err, redisx.ErrNotCombined) || wrote {
				t.Fatalf("SetIfEqualPublish = %t, %v; want ErrNotCombined", wrote, err)
			}
		} else if err != nil || !wrote {
			t.Fatalf("SetIfEqualPublish = %t, %v; want a write", wrote, err)
		}
		if got, err := admin.Get(ctx, key).Result(); err != nil || got != want {
			t.Errorf("the key holds %q, %v; want %q", got, err, want)
		}
	})
}

// TestConn_SetIfEqualPublish_acl: a user refused scripts gets
// ErrNotCombined, nothing written, and the refusal is remembered as a
// refused script's is (ScriptsDenied); a user refused the publish alone
// gets the write, and the publish's refusal as data: the write stands.
func TestConn_SetIfEqualPublish_acl(t *testing.T) {
	redistest.ForEach(t, func(t *testing.T, s *redistest.Server) {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		admin := s.Client(t)
		for _, tc := range []struct {
			name   string
			drop   string
			wrote  bool
			denied bool // ScriptsDenied after the call
		}{
			{name: "no scripts", drop: "+evalsha", denied: true},
			{name: "no publish", drop: "+spublish", wrote: true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				prefix := strings.ReplaceAll(redistest.Key(t, ""), "/", ":")
				key := "{" + prefix + "}"
				var perms []string
				for _, p := range append(redistest.ConnPerms(s.Kind), "~{"+prefix+"*", "&{"+prefix+"*", "+get", "+set", "+evalsha", "+eval", "+spublish") {
					if p != tc.drop {
						perms = append(perms, p)
					}
				}
				if err := admin.Set(ctx, key, "claim", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				// Forced Lua strategies: nothing is probed, so the
				// refusal is learnt from the call.
				cn := redisx.NewConn(s.User(t, perms...).Client(t), &redisx.Capabilities{}, 0)
				wrote, pubErr, err := cn.SetIfEqualPublish(ctx, key, "claim", "value", time.Minute,
					redisx.Publication{Channel: key + ":ann", Message: "announcement", Sharded: true})
				switch {
				case tc.wrote && (err != nil || !wrote || !redisx.IsNoPerm(pubErr)):
					t.Fatalf("SetIfEqualPublish = %t, %v, %v; want a write and the publish's NOPERM", wrote, pubErr, err)
				case !tc.wrote && (!errors.Is(err, redisx.ErrNotCombined) || wrote || pubErr != nil):
					t.Fatalf("SetIfEqualPublish = %t, %v, %v; want ErrNotCombined", wrote, pubErr, err)
				}
				want := "claim"
				if tc.wrote {
					want = "value"
				}
				if got, err := admin.Get(ctx, key).Result(); err != nil || got != want {
					t.Errorf("the key holds %q, %v; want %q", got, err, want)
				}
				caps, err := cn.Capabilities(ctx)
				if err != nil || (caps.ScriptsDenied != "") != tc.denied {
					t.Errorf("capabilities %+v, %v: want ScriptsDenied set %t", caps, err, tc.denied)
				}
			})
		}
	}, redistest.Redis7, redistest.Redis8, redistest.Valkey, redistest.Cluster)
}
