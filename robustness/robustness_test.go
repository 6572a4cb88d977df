package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
)

// TestMain makes the test binary a worker when the coordinator starts it
// as one (the coordinator runs os.Args[0] again).
func TestMain(m *testing.M) {
	if os.Getenv(envWorker) != "" {
		os.Exit(workerMain())
	}
	os.Exit(m.Run())
}

// need skips t (fails it under CI) when kind's binary is missing.
func need(t *testing.T, kind redistest.Kind) {
	t.Helper()
	bin, env := redistest.Binary(kind)
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s: %s missing (set %s or run scripts/provision.sh)", kind, bin, env)
		}
		t.Skipf("%s: %s missing (run scripts/provision.sh)", kind, bin)
	}
}

// suite runs the suite with args and returns its summary and result.
func suite(t *testing.T, args ...string) (*summary, *result) {
	t.Helper()
	o, err := parseFlags(args, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var out strings.Builder
	sum, res, err := runOnce(context.Background(), o, dir, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	sum.Command = "go run ./robustness " + strings.Join(args, " ")
	writeSummary(&out, sum, res)
	t.Logf("\n%s", out.String())
	if len(res.Violations) > 0 {
		report := writeReport(dir, sum, res)
		if b, err := os.ReadFile(report); err == nil {
			t.Logf("report (%s):\n%s", report, tail(string(b), 20000))
		}
	}
	return sum, res
}

// TestShort is the suite's short form: fixed seeds on Redis 8.6 and
// Valkey 9, one random seed (printed, to replay with -seed), and a fixed
// seed on a Cluster of Redis 8.6 (its faults: pauses and failovers), every
// failpoint on. A violation that no open issue names fails it.
func TestShort(t *testing.T) {
	runs := []struct {
		kind redistest.Kind
		seed uint64
		d    time.Duration
	}{
		{redistest.Redis8, 1, 40 * time.Second},
		{redistest.Valkey, 2, 30 * time.Second},
		{redistest.Redis8, 0, 20 * time.Second},
		{redistest.Cluster, 5, 20 * time.Second},
	}
	if testing.Short() {
		runs = runs[:1]
		runs[0].d = 15 * time.Second
	}
	for _, r := range runs {
		t.Run(fmt.Sprintf("%s/seed=%d", r.kind, r.seed), func(t *testing.T) {
			need(t, r.kind)
			args := []string{"-server", string(r.kind), "-duration", r.d.String()}
			if r.seed != 0 {
				args = append(args, "-seed", fmt.Sprint(r.seed))
			}
			sum, res := suite(t, args...)
			if r.seed == 0 {
				t.Logf("random seed %d: replay with go run ./robustness -server %s -seed %d", sum.Seed, r.kind, sum.Seed)
			}
			for _, v := range res.failures() {
				t.Errorf("[%s] %s", v.Check, v.Message)
			}
			// The run must have exercised what it checks.
			for _, c := range []string{"linearizable ops", "read-your-writes", "one-load", "remote-failure", "fencing", "run-once", "purge", "soft-purge", "invalidate", "soft-invalidate", "invalidate (within a value's life of one)", "cap", "leaks"} {
				if res.Checked[c] == 0 {
					t.Errorf("check %q looked at nothing", c)
				}
			}
			if len(sum.Failpoints) == 0 || len(sum.Faults) == 0 {
				t.Errorf("no failpoint or fault fired: %v %v", sum.Failpoints, sum.Faults)
			}
		})
	}
}

// TestSabotage breaks each promise on purpose and shows the check that
// guards it report it: without this, a check that can never fail would
// pass every run.
func TestSabotage(t *testing.T) {
	need(t, redistest.Redis8)
	if testing.Short() {
		t.Skip("the sabotaged runs take a minute")
	}
	cases := []struct {
		sabotage, check string
		args            []string
	}{
		{"fence", "fencing", []string{"-lin", "0", "-exp", "0", "-http", "0", "-locks", "3"}},
		{"waiter", "remote-failure", []string{"-exp", "0", "-http", "0", "-locks", "0", "-lin", "4"}},
		{"stale", "read-your-writes", []string{"-lin", "0", "-http", "0", "-locks", "0", "-exp", "4"}},
		{"purge", "purge", []string{"-lin", "0", "-exp", "0", "-locks", "0", "-http", "4"}},
		{"softpurge", "soft-purge", []string{"-lin", "0", "-exp", "0", "-locks", "0", "-http", "4"}},
		{"tags", "invalidate", []string{"-lin", "0", "-http", "0", "-locks", "0", "-exp", "4"}},
		{"softtags", "soft-invalidate", []string{"-lin", "0", "-http", "0", "-locks", "0", "-exp", "4"}},
		{"cap", "cap", []string{"-lin", "0", "-http", "0", "-locks", "0", "-exp", "4"}},
	}
	for _, c := range cases {
		t.Run(c.sabotage, func(t *testing.T) {
			args := append([]string{"-duration", "12s", "-seed", "7", "-faults", "", "-proxy=false", "-failpoints=false", "-crash=false",
				"-sabotage", c.sabotage}, c.args...)
			_, res := suite(t, args...)
			found := 0
			for _, v := range res.failures() {
				if v.Check == c.check {
					found++
				}
			}
			if found == 0 {
				t.Fatalf("sabotage %q: the %s check reported nothing (violations: %d)", c.sabotage, c.check, len(res.Violations))
			}
			t.Logf("sabotage %q: %d %s violations", c.sabotage, found, c.check)
		})
	}
}
