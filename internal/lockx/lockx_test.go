package lockx_test

import (
	"testing"

	"github.com/hotkv/stampede/internal/lockx"
	"github.com/hotkv/stampede/internal/redisx"
	"github.com/hotkv/stampede/lock"
)

// The public enums must name the same strategies as redisx's, which the
// conversions rely on.
func TestConversions(t *testing.T) {
	for _, c := range []redisx.Capabilities{
		{Server: "redis", Version: "8.6.3", Release: redisx.ReleaseDelex, Extend: redisx.ExtendSetIfEq, Digest: redisx.DigestNative,
			DelIfEq: true, ScriptsDenied: "NOPERM", ACLRefused: "DIGEST", AnnounceDenied: "NOPERM channel"},
		{Release: redisx.ReleaseDelIfEq},
		{},
	} {
		l := lockx.Capabilities(c)
		if got := lockx.Strategies(l); got != c {
			t.Errorf("round trip of %+v = %+v", c, got)
		}
		if l.String() != c.String() {
			t.Errorf("String: lock %q, redisx %q", l, c)
		}
	}
	pairs := []struct{ pub, internal string }{
		{lock.ReleaseLua.String(), redisx.ReleaseLua.String()},
		{lock.ReleaseDelIfEq.String(), redisx.ReleaseDelIfEq.String()},
		{lock.ReleaseDelex.String(), redisx.ReleaseDelex.String()},
		{lock.ExtendLua.String(), redisx.ExtendLua.String()},
		{lock.ExtendSetIfEq.String(), redisx.ExtendSetIfEq.String()},
		{lock.DigestLua.String(), redisx.DigestLua.String()},
		{lock.DigestNative.String(), redisx.DigestNative.String()},
	}
	for _, p := range pairs {
		if p.pub != p.internal {
			t.Errorf("lock says %q, redisx %q", p.pub, p.internal)
		}
	}
}
