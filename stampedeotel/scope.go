package stampedeotel

import (
	"runtime/debug"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// scope is the name of the instrumentation scope of the meter and tracer.
const scope = "github.com/hotkv/stampede/stampedeotel"

// schemaURL is the schema of the semantic conventions the attribute names
// follow (error.type, http.request.method, http.response.status_code,
// http.route).
const schemaURL = semconv.SchemaURL

// develVersion is the scope's version when the build does not say which
// version of this module it holds: a build inside this repository, where
// the module is the main one or replaced by a directory, or one without
// build information.
const develVersion = "devel"

// scopeVersion returns the version of this module in the running binary,
// for the instrumentation scope: what the build information records for it
// (as a dependency, or as the main module), else develVersion.
func scopeVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return develVersion
	}
	return moduleVersion(bi, scope)
}

// moduleVersion returns the version bi records for the module path, or
// develVersion when it records none (no such module, "(devel)", or a
// replacement by a directory, whose version is not what was built).
func moduleVersion(bi *debug.BuildInfo, path string) string {
	v := ""
	switch {
	case bi.Main.Path == path:
		v = bi.Main.Version
	default:
		for _, d := range bi.Deps {
			if d.Path != path {
				continue
			}
			v = d.Version
			if d.Replace != nil {
				v = d.Replace.Version // "" for a directory
			}
			break
		}
	}
	if v == "" || v == "(devel)" {
		return develVersion
	}
	return v
}
