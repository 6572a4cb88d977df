package fleet_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/fleet"
	"go.uber.org/goleak"
)

const roleEnv = "FLEETTEST_ROLE"

// TestMain doubles as the workers: Start runs this test binary again with
// FLEETTEST_ROLE set.
func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case "":
		goleak.VerifyTestMain(m)
	case "echo": // answers each line with name:line until stdin closes
		name := os.Getenv("FLEETTEST_NAME")
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println(name + ":" + sc.Text())
		}
		os.Exit(0)
	case "fail": // says one thing and fails
		fmt.Println("about to fail")
		os.Exit(3)
	case "quiet": // exits cleanly without a word
		os.Exit(0)
	case "chatty": // answers, and says one more thing when stdin closes
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println("ok")
		}
		fmt.Println("one more thing")
		os.Exit(0)
	}
}

func start(tb testing.TB, ctx context.Context, roles ...string) *fleet.Fleet {
	tb.Helper()
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = fmt.Sprintf("%s-%d", r, i)
	}
	f, err := fleet.Start(ctx, names, func(name string) []string {
		role, _, _ := strings.Cut(name, "-")
		return []string{roleEnv + "=" + role, "FLEETTEST_NAME=" + name}
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(f.Close)
	return f
}

func testCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(tb.Context(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func TestFleet_sendCollectFinish(t *testing.T) {
	ctx := testCtx(t)
	f := start(t, ctx, "echo", "echo", "echo")
	if err := f.Send(1, "hello"); err != nil {
		t.Fatal(err)
	}
	var got []string
	collect := func(worker int, line string) error {
		got = append(got, fmt.Sprintf("%d %s", worker, line))
		return nil
	}
	if err := f.Collect(ctx, 1, collect); err != nil {
		t.Fatal(err)
	}
	if got[0] != "1 echo-1:hello" {
		t.Fatalf("after Send to worker 1: %q", got[0])
	}
	if err := f.Broadcast("all"); err != nil {
		t.Fatal(err)
	}
	got = nil
	if err := f.Collect(ctx, 3, collect); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, g := range got {
		seen[g] = true
	}
	for i := range 3 {
		if want := fmt.Sprintf("%d echo-%d:all", i, i); !seen[want] {
			t.Errorf("broadcast answers %q lack %q", got, want)
		}
	}
	if err := f.Finish(ctx); err != nil {
		t.Fatalf("Finish: %v", err)
	}
}

func TestFleet_errors(t *testing.T) {
	ok := func(int, string) error { return nil }
	tests := []struct {
		name  string
		roles []string
		run   func(ctx context.Context, f *fleet.Fleet) error
		want  string
	}{
		{"a worker fails during Collect", []string{"echo", "fail"},
			func(ctx context.Context, f *fleet.Fleet) error { return f.Collect(ctx, 3, ok) }, "worker fail-1: exit status 3"},
		{"every worker exits before enough lines", []string{"quiet", "quiet"},
			func(ctx context.Context, f *fleet.Fleet) error { return f.Collect(ctx, 1, ok) }, "every worker exited with 1 lines still expected"},
		{"the handler refuses a line", []string{"echo"},
			func(ctx context.Context, f *fleet.Fleet) error {
				if err := f.Send(0, "x"); err != nil {
					return err
				}
				return f.Collect(ctx, 1, func(int, string) error { return fmt.Errorf("bad line") })
			}, "worker echo-0: bad line"},
		{"a worker writes after its input closed", []string{"chatty"},
			func(ctx context.Context, f *fleet.Fleet) error { return f.Finish(ctx) }, `worker chatty-0: unexpected output "one more thing"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			f := start(t, ctx, tt.roles...)
			err := tt.run(ctx, f)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// Close kills workers that are still running (these wait on their input
// forever) and returns once their readers are done; goleak checks the
// rest.
func TestFleet_closeKillsRunningWorkers(t *testing.T) {
	ctx := testCtx(t)
	f := start(t, ctx, "echo", "echo")
	if err := f.Broadcast("ping"); err != nil {
		t.Fatal(err)
	}
	if err := f.Collect(ctx, 2, func(int, string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { f.Close(); f.Close(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("Close did not return with workers still running")
	}
}
