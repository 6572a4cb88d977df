package stampedeotel

import (
	"runtime/debug"
	"testing"
)

// The scope's version is what the build information records for this
// module, as a dependency or as the main module, and "devel" where it
// records none.
func TestModuleVersion(t *testing.T) {
	dep := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	tests := []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"a dependency", debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "v1.2.3"},
			Deps: []*debug.Module{dep("github.com/hotkv/stampede", "v0.1.0", nil), dep(scope, "v0.1.0", nil)}}, "v0.1.0"},
		{"replaced by another version", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{dep(scope, "v0.1.0", dep(scope, "v0.1.1", nil))}}, "v0.1.1"},
		{"replaced by a directory", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"},
			Deps: []*debug.Module{dep(scope, "v0.1.0", dep("../stampedeotel", "", nil))}}, develVersion},
		{"the main module, released", debug.BuildInfo{Main: debug.Module{Path: scope, Version: "v0.2.0"}}, "v0.2.0"},
		{"the main module, in the repository", debug.BuildInfo{Main: debug.Module{Path: scope, Version: "(devel)"}}, develVersion},
		{"not in the build", debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "v1.0.0"}}, develVersion},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := moduleVersion(&tt.bi, scope); got != tt.want {
				t.Errorf("moduleVersion = %q, want %q", got, tt.want)
			}
		})
	}
	if v := scopeVersion(); v == "" {
		t.Error("scopeVersion is empty")
	}
}
