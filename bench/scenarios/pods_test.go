package scenarios

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"go.uber.org/goleak"
)

// TestMain lets the test binary serve as the pods of these tests.
func TestMain(m *testing.M) {
	if IsPod() {
		os.Exit(PodMain())
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

func pods(tb testing.TB) *Pods {
	tb.Helper()
	s, err := embedded.Start()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Close)
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	ps := NewPods(exe, "redis://"+s.Addr())
	tb.Cleanup(func() { ps.Close(0) })
	return ps
}

func TestPods_Run(t *testing.T) {
	ps := pods(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	jobs := []job{
		{Kind: "cold", Approach: "naive", NS: "t:run", Keys: 1, PerKey: 4, Goroutines: 4, Counter: "t:run:n", Load: time.Millisecond, TTL: time.Minute},
		{Kind: "cold", Approach: "naive", NS: "t:run", Keys: 1, PerKey: 4, Goroutines: 4, Counter: "t:run:n", Load: time.Millisecond, TTL: time.Minute},
	}
	res, start, err := ps.Run(ctx, jobs, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ps.Len() != 2 || len(res) != 2 || start.IsZero() {
		t.Fatalf("%d pods, %d results, start %v", ps.Len(), len(res), start)
	}
	for i, r := range res {
		if r.Requests != 4 || r.Errors != 0 || len(r.Lat) != 4 {
			t.Errorf("pod %d: %+v", i, r)
		}
	}
	// The pods take another job after the first.
	if _, _, err := ps.Run(ctx, jobs[:1], 20*time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestPods_Run_podError(t *testing.T) {
	ps := pods(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, _, err := ps.Run(ctx, []job{{Kind: "cold", Approach: "telepathy", NS: "t:err"}}, 20*time.Second)
	if err == nil || !strings.Contains(err.Error(), `unknown approach "telepathy"`) {
		t.Fatalf("err = %v, want the pod's unknown approach", err)
	}
}

// TestPods_Close_busy: a pod in the middle of a long job is killed at
// once by Close(0), and Run, cut short by its context, says why.
func TestPods_Close_busy(t *testing.T) {
	ps := pods(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, _, err := ps.Run(ctx, []job{{Kind: "hit", Approach: "raw", NS: "t:busy", Key: "k", Goroutines: 1, Duration: time.Minute}}, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "while running") {
		t.Fatalf("err = %v, want the run cut short", err)
	}
	start := time.Now()
	ps.Close(0)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	if ps.Len() != 0 {
		t.Errorf("%d pods left", ps.Len())
	}
}
