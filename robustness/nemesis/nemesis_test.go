package nemesis_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/robustness/nemesis"
	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { redistest.Main(m, nil) }

// kinds are the servers the faults are tested on.
func kinds() []redistest.Kind { return []redistest.Kind{redistest.Redis8, redistest.Valkey} }

// launch starts a server of kind as the suite does, with nemesis.Launch,
// and stops it when tb ends. It skips tb (or, with CI=true, fails it) when
// the binary is missing, as redistest.Start does.
func launch(tb testing.TB, kind redistest.Kind) *redistest.Server {
	tb.Helper()
	bin, env := redistest.Binary(kind)
	if _, err := os.Stat(bin); err != nil && os.Getenv("CI") != "true" {
		tb.Skipf("%s server binary %s (set %s): %v (run scripts/provision.sh)", kind, bin, env, err)
	}
	srv, err := nemesis.Launch(kind, tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(srv.Stop)
	return srv
}

// forKinds runs fn as a subtest on a server of every kind, started with
// launch and holding the key "k" = "v", written before fn.
func forKinds(t *testing.T, fn func(t *testing.T, srv *redistest.Server, c *redis.Client)) {
	t.Helper()
	for _, kind := range kinds() {
		t.Run(string(kind), func(t *testing.T) {
			srv := launch(t, kind)
			c := client(t, srv.Addrs()[0], nil)
			if err := c.Set(t.Context(), "k", "v", 0).Err(); err != nil {
				t.Fatal(err)
			}
			fn(t, srv, c)
		})
	}
}

// client returns a client of addr that never retries, so that it sees
// every reply, closed when tb ends. o, if set, supplies the other options.
func client(tb testing.TB, addr string, o *redis.Options) *redis.Client {
	tb.Helper()
	if o == nil {
		o = &redis.Options{}
	}
	o.Addr, o.MaxRetries, o.DisableIdentity = addr, -1, true
	if o.ReadTimeout == 0 {
		o.ReadTimeout = 2 * time.Second
	}
	c := redis.NewClient(o)
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// faultRun is a Run in the background, held long enough for the test to
// see the fault and then cancelled.
type faultRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed once rec and err are set
	rec    nemesis.Record
	err    error
}

// startFault starts f on srv for 20 s, ended by stop (or when tb ends).
func startFault(tb testing.TB, f nemesis.Fault, srv *redistest.Server) *faultRun {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fr := &faultRun{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(fr.done)
		fr.rec, fr.err = nemesis.Run(ctx, f, srv, 20*time.Second, nil)
	}()
	tb.Cleanup(func() { fr.stop() })
	return fr
}

// stop cancels the fault's context and returns what Run returned.
func (fr *faultRun) stop() (nemesis.Record, error) {
	fr.cancel()
	<-fr.done
	return fr.rec, fr.err
}

// await polls cond every millisecond until it holds: what a client sees
// of a fault has no other signal. It fails tb if Run returns first or
// after 15 s.
func (fr *faultRun) await(tb testing.TB, what string, cond func(ctx context.Context) bool) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond(ctx) {
		select {
		case <-fr.done:
			tb.Fatalf("Run returned before %s: %v", what, fr.err)
		case <-ctx.Done():
			tb.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// ended checks what Run returned when stop cancelled it: the fault's
// record, and ctx's error.
func ended(tb testing.TB, f nemesis.Fault, rec nemesis.Record, err error) {
	tb.Helper()
	if !errors.Is(err, context.Canceled) || errors.Is(err, nemesis.ErrNotRestored) {
		tb.Fatalf("Run(%s) = %v, want only context.Canceled", f, err)
	}
	if rec.Name != string(f) || rec.Start.IsZero() || rec.End.Before(rec.Start) || rec.Detail == "" {
		tb.Errorf("Record = %+v", rec)
	}
	tb.Logf("%s: %v, %s", f, rec.End.Sub(rec.Start).Round(time.Millisecond), rec.Detail)
}

func hasPrefix(err error, prefix string) bool {
	return err != nil && strings.HasPrefix(err.Error(), prefix)
}

// state is what a fault must leave as it found it: every configuration
// value (with the hidden ones the faults change) and every ACL user.
func state(tb testing.TB, addr string) map[string]string {
	tb.Helper()
	c := client(tb, addr, nil)
	ctx := tb.Context()
	st, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		tb.Fatal(err)
	}
	for _, hidden := range []string{"key-load-delay", "loading-process-events-interval-bytes"} {
		m, err := c.ConfigGet(ctx, hidden).Result()
		if err != nil {
			tb.Fatal(err)
		}
		st[hidden] = m[hidden]
	}
	users, err := c.Do(ctx, "ACL", "LIST").StringSlice()
	if err != nil {
		tb.Fatal(err)
	}
	for _, u := range users {
		st["acl "+strings.Fields(u)[1]] = u
	}
	return st
}

// unchanged checks that the server is as before and still holds k = v.
func unchanged(tb testing.TB, addr string, before map[string]string) {
	tb.Helper()
	after := state(tb, addr)
	for _, k := range slices.Sorted(maps.Keys(before)) {
		if before[k] != after[k] {
			tb.Errorf("%s: %q before the fault, %q after", k, before[k], after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			tb.Errorf("%s: %q after the fault, absent before", k, after[k])
		}
	}
	c := client(tb, addr, nil)
	if v, err := c.Get(tb.Context(), "k").Result(); v != "v" || err != nil {
		tb.Errorf(`GET k = %q, %v after the fault, want "v"`, v, err)
	}
	if err := c.Set(tb.Context(), "probe", "after", 0).Err(); err != nil {
		tb.Errorf("SET after the fault: %v", err)
	}
}

func TestRun_busy(t *testing.T) {
	forKinds(t, func(t *testing.T, srv *redistest.Server, c *redis.Client) {
		before := state(t, srv.Addrs()[0])
		fr := startFault(t, nemesis.Busy, srv)
		var got error
		fr.await(t, "a BUSY reply", func(ctx context.Context) bool {
			got = c.Set(ctx, "probe", "during", 0).Err()
			return hasPrefix(got, "BUSY")
		})
		t.Logf("SET: %v", got)
		rec, err := fr.stop()
		ended(t, nemesis.Busy, rec, err)
		unchanged(t, srv.Addrs()[0], before)
	})
}

func TestRun_oom(t *testing.T) {
	forKinds(t, func(t *testing.T, srv *redistest.Server, c *redis.Client) {
		before := state(t, srv.Addrs()[0])
		fr := startFault(t, nemesis.OOM, srv)
		var got error
		fr.await(t, "an OOM reply", func(ctx context.Context) bool {
			got = c.Set(ctx, "probe", "during", 0).Err()
			return hasPrefix(got, "OOM command not allowed")
		})
		t.Logf("SET: %v", got)
		if v, err := c.Get(t.Context(), "k").Result(); v != "v" || err != nil {
			t.Errorf(`GET k during the fault = %q, %v, want "v"`, v, err)
		}
		rec, err := fr.stop()
		ended(t, nemesis.OOM, rec, err)
		unchanged(t, srv.Addrs()[0], before)
	})
}

func TestRun_loading(t *testing.T) {
	forKinds(t, func(t *testing.T, srv *redistest.Server, c *redis.Client) {
		before := state(t, srv.Addrs()[0])
		dir, err := c.ConfigGet(t.Context(), "dir").Result()
		if err != nil {
			t.Fatal(err)
		}
		fr := startFault(t, nemesis.Loading, srv)
		var got error
		fr.await(t, "a LOADING reply", func(ctx context.Context) bool {
			got = c.Get(ctx, "k").Err()
			return hasPrefix(got, "LOADING")
		})
		t.Logf("GET: %v", got)
		rec, err := fr.stop()
		ended(t, nemesis.Loading, rec, err)
		unchanged(t, srv.Addrs()[0], before)
		// The filler keys are gone from the last database, and the RDB
		// file DEBUG RELOAD wrote with them.
		last := client(t, srv.Addrs()[0], &redis.Options{DB: 15})
		if n, err := last.DBSize(t.Context()).Result(); n != 0 || err != nil {
			t.Errorf("DBSIZE of db 15 = %d, %v after the fault", n, err)
		}
		if _, err := os.Stat(filepath.Join(dir["dir"], "dump.rdb")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("dump.rdb after the fault: %v", err)
		}
	})
}

func TestRun_loading_noDebug(t *testing.T) {
	srv := redistest.Start(t, redistest.Redis8) // without ServerArgs: no DEBUG
	before := state(t, srv.Addrs()[0])
	rec, err := nemesis.Run(t.Context(), nemesis.Loading, srv, time.Second, nil)
	if !errors.Is(err, nemesis.ErrUnsupported) || !rec.Start.IsZero() {
		t.Fatalf("Run = %+v, %v, want ErrUnsupported before any change", rec, err)
	}
	after := state(t, srv.Addrs()[0])
	if !maps.Equal(before, after) {
		t.Error("the server changed")
	}
}

func TestRun_pause(t *testing.T) {
	forKinds(t, func(t *testing.T, srv *redistest.Server, c *redis.Client) {
		before := state(t, srv.Addrs()[0])
		quick := client(t, srv.Addrs()[0], &redis.Options{ReadTimeout: 100 * time.Millisecond})
		fr := startFault(t, nemesis.Pause, srv)
		var got error
		fr.await(t, "a timeout", func(ctx context.Context) bool {
			got = quick.Get(ctx, "k").Err()
			var ne net.Error
			return errors.As(got, &ne) && ne.Timeout()
		})
		t.Logf("GET: %v", got)
		rec, err := fr.stop()
		ended(t, nemesis.Pause, rec, err)
		unchanged(t, srv.Addrs()[0], before)
	})
}

// dialRaw returns a connection to addr that the server has answered
// once, closed when tb ends.
func dialRaw(tb testing.TB, addr string) net.Conn {
	tb.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		tb.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 7)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "+PONG\r\n" {
		tb.Fatalf("PING = %q, %v", buf, err)
	}
	return conn
}

// lost checks that conn was closed by a killed server: it reads EOF or a
// reset, not a timeout or an answer.
func lost(tb testing.TB, conn net.Conn) {
	tb.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := conn.Read(make([]byte, 64))
	if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		tb.Fatalf("read on a connection to the killed server = %d bytes, %v; want EOF or a reset", n, err)
	}
	tb.Logf("old connection: %v", err)
}

// withUser creates the ACL user "worker" (and a runtime configuration
// value), which a restart must bring back, and returns its client.
func withUser(tb testing.TB, srv *redistest.Server) *redis.Client {
	tb.Helper()
	if err := nemesis.CreateUser(tb.Context(), srv, "worker", "pw"); err != nil {
		tb.Fatal(err)
	}
	c := client(tb, srv.Addrs()[0], nil)
	if err := c.ConfigSet(tb.Context(), "slowlog-max-len", "777").Err(); err != nil {
		tb.Fatal(err)
	}
	return client(tb, srv.Addrs()[0], &redis.Options{Username: "worker", Password: "pw"})
}

func TestRun_pauseKill(t *testing.T) {
	forKinds(t, func(t *testing.T, srv *redistest.Server, c *redis.Client) {
		uc := withUser(t, srv)
		if err := uc.Set(t.Context(), "acked", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		before := state(t, srv.Addrs()[0])
		conn := dialRaw(t, srv.Addrs()[0])
		quick := client(t, srv.Addrs()[0], &redis.Options{ReadTimeout: 100 * time.Millisecond})
		fr := startFault(t, nemesis.PauseKill, srv)
		fr.await(t, "a timeout", func(ctx context.Context) bool {
			err := quick.Get(ctx, "k").Err()
			var ne net.Error
			return errors.As(err, &ne) && ne.Timeout()
		})
		// Sent to the stopped server: never answered.
		if _, err := conn.Write([]byte("GET k\r\n")); err != nil {
			t.Fatal(err)
		}
		rec, err := fr.stop()
		ended(t, nemesis.PauseKill, rec, err)
		lost(t, conn)
		unchanged(t, srv.Addrs()[0], before)
		if v, err := uc.Get(t.Context(), "acked").Result(); v != "1" || err != nil {
			t.Errorf(`GET acked as the worker after the restart = %q, %v, want "1"`, v, err)
		}
	})
}

func TestRun_restart(t *testing.T) {
	forKinds(t, func(t *testing.T, srv *redistest.Server, c *redis.Client) {
		uc := withUser(t, srv)
		if err := uc.Set(t.Context(), "acked", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		before := state(t, srv.Addrs()[0])
		conn := dialRaw(t, srv.Addrs()[0])
		rec, err := nemesis.Run(t.Context(), nemesis.Restart, srv, 0, nil)
		if err != nil || rec.Start.IsZero() || rec.End.Before(rec.Start) {
			t.Fatalf("Run = %+v, %v", rec, err)
		}
		t.Logf("restart: %s", rec.Detail)
		lost(t, conn)
		unchanged(t, srv.Addrs()[0], before)
		if v, err := uc.Get(t.Context(), "acked").Result(); v != "1" || err != nil {
			t.Errorf(`GET acked as the worker after the restart = %q, %v, want "1"`, v, err)
		}
	})
}

// TestRun_restart_noACLFile restarts a server that has no ACL file (not
// started by Launch): Run gives it back its users itself.
func TestRun_restart_noACLFile(t *testing.T) {
	srv := redistest.StartWith(t, redistest.Redis8, nemesis.ServerArgs()...)
	uc := withUser(t, srv)
	if err := uc.Set(t.Context(), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := state(t, srv.Addrs()[0])
	if rec, err := nemesis.Run(t.Context(), nemesis.Restart, srv, 0, nil); err != nil {
		t.Fatalf("Run = %+v, %v", rec, err)
	}
	unchanged(t, srv.Addrs()[0], before)
	if err := uc.Set(t.Context(), "probe", "after", 0).Err(); err != nil {
		t.Errorf("SET as the worker after the restart: %v", err)
	}
}

func TestRun_acl(t *testing.T) {
	forKinds(t, func(t *testing.T, srv *redistest.Server, c *redis.Client) {
		ctx := t.Context()
		if err := nemesis.CreateUser(ctx, srv, "worker", "pw"); err != nil {
			t.Fatal(err)
		}
		// A user with a selector, whose rules must come back whole.
		if err := c.Do(ctx, "ACL", "SETUSER", "sel", "on", ">pw2", "~a:*", "+get", "(~b:* +set)").Err(); err != nil {
			t.Fatal(err)
		}
		uc := client(t, srv.Addrs()[0], &redis.Options{Username: "worker", Password: "pw", PoolSize: 1})
		id, err := uc.ClientID(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		before := state(t, srv.Addrs()[0])
		fr := startFault(t, nemesis.ACL, srv)
		var got error
		fr.await(t, "a NOPERM reply", func(ctx context.Context) bool {
			got = uc.Set(ctx, "probe", "during", 0).Err()
			return hasPrefix(got, "NOPERM")
		})
		t.Logf("SET: %v", got)
		if err := uc.Publish(ctx, "ch", "m").Err(); !hasPrefix(err, "NOPERM") {
			t.Errorf("PUBLISH during the fault = %v, want NOPERM", err)
		}
		if v, err := uc.Get(ctx, "k").Result(); v != "v" || err != nil {
			t.Errorf(`GET k during the fault = %q, %v, want "v"`, v, err)
		}
		rec, err := fr.stop()
		ended(t, nemesis.ACL, rec, err)
		unchanged(t, srv.Addrs()[0], before)
		if err := uc.Set(ctx, "probe", "after", 0).Err(); err != nil {
			t.Errorf("SET as the worker after the fault: %v", err)
		}
		if id2, err := uc.ClientID(ctx).Result(); id2 != id || err != nil {
			t.Errorf("the worker's connection is %d (%v) after the fault, was %d", id2, err, id)
		}
	})
}

// TestRun_endsAfterD runs every fault, one after the other on one server,
// for its whole duration.
func TestRun_endsAfterD(t *testing.T) {
	const d = 300 * time.Millisecond
	forKinds(t, func(t *testing.T, srv *redistest.Server, c *redis.Client) {
		if err := nemesis.CreateUser(t.Context(), srv, "worker", "pw"); err != nil {
			t.Fatal(err)
		}
		for _, f := range nemesis.Faults() {
			if f == nemesis.Failover {
				continue // a Cluster's: TestRun_failover
			}
			before := state(t, srv.Addrs()[0])
			rec, err := nemesis.Run(t.Context(), f, srv, d, nil)
			if err != nil {
				t.Fatalf("Run(%s) = %v", f, err)
			}
			want := d
			if f == nemesis.Restart {
				want = 0
			}
			if got := rec.End.Sub(rec.Start); got < want || rec.Name != string(f) {
				t.Errorf("Run(%s) = %+v, lasting %v, want at least %v", f, rec, got, want)
			}
			unchanged(t, srv.Addrs()[0], before)
		}
	})
}

func TestRun_unsupported(t *testing.T) {
	srv := redistest.Start(t, redistest.Miniredis)
	for _, f := range nemesis.Faults() {
		if _, err := nemesis.Run(t.Context(), f, srv, time.Second, nil); !errors.Is(err, nemesis.ErrUnsupported) {
			t.Errorf("Run(%s) on miniredis = %v, want ErrUnsupported", f, err)
		}
	}
}

// TestRun_failover fails masters of a Cluster over, gracefully and by
// takeover, and checks that the replica took over and the data stayed.
func TestRun_failover(t *testing.T) {
	srv := launch(t, redistest.Cluster)
	ctx := t.Context()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: slices.Clone(srv.Addrs())})
	t.Cleanup(func() { _ = rc.Close() })
	keys := []string{"a", "b", "c", "d", "e", "f"} // on every shard
	for _, k := range keys {
		if err := rc.Set(ctx, k, "v"+k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	o := &nemesis.Options{Rand: rand.New(rand.NewPCG(1, 2))}
	modes := map[string]int{}
	for range 4 {
		rec, err := nemesis.Run(ctx, nemesis.Failover, srv, 0, o)
		if err != nil {
			t.Fatalf("Run(failover) = %v (%+v)", err, rec)
		}
		var mode, to, from, slots string
		if _, err := fmt.Sscanf(rec.Detail, "%s %s took over %s slots %s", &mode, &to, &from, &slots); err != nil {
			t.Fatalf("Detail %q: %v", rec.Detail, err)
		}
		modes[mode]++
		from = strings.TrimSuffix(from, "'s")
		if got := role(t, to); got != "master" {
			t.Errorf("%s after %s: %s, want master", to, rec.Detail, got)
		}
		if got := role(t, from); got != "slave" {
			t.Errorf("%s after %s: %s, want slave", from, rec.Detail, got)
		}
		t.Logf("%v: %s", rec.End.Sub(rec.Start).Round(time.Millisecond), rec.Detail)
	}
	if len(modes) != 2 {
		t.Errorf("modes %v, want both FAILOVER: and TAKEOVER:", modes)
	}
	for _, k := range keys {
		// Nothing was written during the failovers: nothing is lost.
		if got, err := rc.Get(ctx, k).Result(); got != "v"+k || err != nil {
			t.Errorf("GET %s = %q, %v after the failovers", k, got, err)
		}
	}
	if _, err := nemesis.Run(ctx, nemesis.Pause, srv, 100*time.Millisecond, o); err != nil {
		t.Errorf("Run(pause) on a Cluster = %v", err)
	}
	for _, f := range []nemesis.Fault{nemesis.Busy, nemesis.OOM, nemesis.Loading, nemesis.PauseKill, nemesis.ACL, nemesis.Restart} {
		if rec, err := nemesis.Run(ctx, f, srv, time.Second, nil); !errors.Is(err, nemesis.ErrUnsupported) || !rec.Start.IsZero() {
			t.Errorf("Run(%s) on a Cluster = %+v, %v, want ErrUnsupported", f, rec, err)
		}
	}
}

// role returns what ROLE says the node at addr is.
func role(tb testing.TB, addr string) string {
	tb.Helper()
	v, err := client(tb, addr, nil).Do(tb.Context(), "ROLE").Slice()
	if err != nil || len(v) == 0 {
		tb.Fatalf("ROLE on %s: %v, %v", addr, v, err)
	}
	return fmt.Sprint(v[0])
}

func TestRun_failover_notCluster(t *testing.T) {
	srv := redistest.Start(t, redistest.Redis8)
	if rec, err := nemesis.Run(t.Context(), nemesis.Failover, srv, 0, nil); !errors.Is(err, nemesis.ErrUnsupported) || !rec.Start.IsZero() {
		t.Fatalf("Run(failover) on one server = %+v, %v, want ErrUnsupported", rec, err)
	}
}

func TestRun_cancelledBefore(t *testing.T) {
	srv := redistest.Start(t, redistest.Miniredis)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	rec, err := nemesis.Run(ctx, nemesis.Pause, srv, time.Second, nil)
	if !errors.Is(err, context.Canceled) || !rec.Start.IsZero() {
		t.Fatalf("Run = %+v, %v, want context.Canceled before any change", rec, err)
	}
}

func TestParseFault(t *testing.T) {
	for _, f := range nemesis.Faults() {
		if got, err := nemesis.ParseFault(string(f)); got != f || err != nil {
			t.Errorf("ParseFault(%q) = %q, %v", f, got, err)
		}
	}
	if _, err := nemesis.ParseFault("meteor"); err == nil {
		t.Error("ParseFault(meteor) = nil error")
	}
}

func ExampleRun() {
	dir, err := os.MkdirTemp("", "nemesis-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	srv, err := nemesis.Launch(redistest.Valkey, dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Stop()
	rec, err := nemesis.Run(context.Background(), nemesis.Pause, srv, 100*time.Millisecond, nil)
	fmt.Println(rec.Name, err)
}
