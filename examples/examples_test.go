// Package examples_test runs every example the way the README does, so
// that the commands it gives keep working: each example is built with the
// race detector and run on the embedded server (REDIS_URL unset), and
// must exit 0 (each exits non-zero when its claim fails) and print its
// conclusion.
package examples_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs every example; skipped with -short")
	}
	tests := []struct {
		name string
		args []string
		want string // a regexp the output must match
	}{
		{"stampede", nil, `the loader ran \d+ times for naive cache-aside and 2 times for stampede's GetOrLoad(?s:.*)cold-start load answered \d+ of its 200 requests`},
		{"query", []string{"-rows", "20000"}, `the query ran \d+ times without the cache and once with it`},
		{"httpserver", []string{"-demo"}, `200 requests on 2 instances were answered by 1 render`},
		{"cron", nil, `every tick ran exactly once`},
		{"gocron", nil, `every tick ran exactly once`},
		{"payments", nil, `with fencing, the store turned d's late refund away`},
		{"metrics", []string{"-demo"}, `/metrics counted every request: 1 render for 20 concurrent requests \(19 HIT\), 1 BYPASS, 2 loads, 1 contended lock`},
	}
	dependOnSources(t)
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REDIS_URL=") {
			env = append(env, kv)
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The build is the compiler's work, not the example's: on a
			// busy machine a cold build with the race detector (query's
			// SQLite above all) took more than five minutes. It is bounded
			// by go test's -timeout only; the deadline below is the run's.
			bin := filepath.Join(t.TempDir(), tt.name)
			build := exec.CommandContext(t.Context(), "go", "build", "-race", "-o", bin, "./"+tt.name)
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("go build ./examples/%s: %v\n%s", tt.name, err, out)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			run := exec.CommandContext(ctx, bin, tt.args...)
			run.Env = env
			out, err := run.CombinedOutput()
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", tt.name, strings.Join(tt.args, " "), err, out)
			}
			if !regexp.MustCompile(tt.want).Match(out) {
				t.Fatalf("%s printed no line matching %q:\n%s", tt.name, tt.want, out)
			}
		})
	}
}

// dependOnSources reads the module's Go files, so that go test's result
// cache, which tracks the files a test opens, is invalidated when any of
// them changes: the examples are built by the go command, not imported.
func dependOnSources(tb testing.TB) {
	tb.Helper()
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && (d.Name() == "testdata" || d.Name() == "compare" || strings.HasPrefix(d.Name(), ".") && path != ".."):
			return filepath.SkipDir
		case !d.IsDir() && (strings.HasSuffix(path, ".go") || strings.HasSuffix(path, ".lua") || d.Name() == "go.mod"):
			_, err := os.ReadFile(path)
			return err
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}
