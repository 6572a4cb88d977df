package redisx_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestConn_permissions: the ACL's refusals of a script become
// *PermissionError. A refusal of EVALSHA itself marks scripts as denied,
// so that Check refuses up front; a refusal of a command inside the script
// (here DEL; Redis 7.0 words it without NOPERM) does not, and names that
// command.
func TestConn_permissions(t *testing.T) {
	redistest.ForEach(t, testPermissions, redistest.Redis7, redistest.Redis8, redistest.Valkey)
	if err := redisx.Denied("x", errors.New("NOPERM not a reply"), ""); err.Error() != "NOPERM not a reply" {
		t.Errorf("Denied changed an error that is not a server reply: %v", err)
	}
}

func testPermissions(t *testing.T, s *redistest.Server) {
	ctx := t.Context()
	prefix := strings.ReplaceAll(redistest.Key(t, ""), "/", ":")
	admin := s.Client(t)
	all := append(redistest.ConnPerms(s.Kind), "~"+prefix+"*", "+get", "+set", "+del", "+evalsha", "+eval")

	for _, tc := range []struct {
		name          string
		drop          string
		scriptsDenied bool
		want          []string // one of
	}{
		{name: "no scripts", drop: "+evalsha", scriptsDenied: true, want: []string{"'evalsha' command"}},
		{name: "no del in the script", drop: "+del", scriptsDenied: false,
			want: []string{"'del' command", "can't run this command"}}, // Redis 7.0 does not name it
	} {
		t.Run(tc.name, func(t *testing.T) {
			var perms []string
			for _, p := range all {
				if p != tc.drop {
					perms = append(perms, p)
				}
			}
			// Forced Lua strategies: the release is the script on every
			// server, and nothing is probed.
			cn := redisx.NewConn(s.User(t, perms...).Client(t), &redisx.Capabilities{}, 0)
			key := prefix + tc.drop
			if err := admin.Set(ctx, key, "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := cn.DeleteIfEqual(ctx, key, "v")
			var pe *redisx.PermissionError
			named := false
			for _, w := range tc.want {
				named = named || err != nil && strings.Contains(err.Error(), w)
			}
			if !errors.Is(err, redisx.ErrPermission) || !errors.As(err, &pe) || !named {
				t.Fatalf("DeleteIfEqual: %v, want a PermissionError naming %s", err, tc.want)
			}
			caps, err := cn.Capabilities(ctx)
			if err != nil || (caps.ScriptsDenied != "") != tc.scriptsDenied {
				t.Errorf("capabilities %+v, %v: want ScriptsDenied set %t", caps, err, tc.scriptsDenied)
			}
			err = cn.Check(ctx, key, redisx.OpRelease, 1)
			if errors.Is(err, redisx.ErrPermission) != tc.scriptsDenied {
				t.Errorf("Check: %v, want ErrPermission %t", err, tc.scriptsDenied)
			}
			if n, _ := admin.Exists(ctx, key).Result(); n != 1 {
				t.Errorf("the refused delete deleted %s", key)
			}
		})
	}
}
