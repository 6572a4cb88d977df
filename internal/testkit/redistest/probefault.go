package redistest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ProbeFault is a hook on a client's probe of sharded pub/sub (keysub's
// Probe: one SPUBLISH of an empty message, which no announcement and no
// hand-off is), so that the probe meets a transient reply and nothing
// else the client sends does. HoldNext and MakeBusy make the probe meet a
// real BUSY; Lose makes every probe fail with a timeout, as a probe whose
// reply was lost. Until either is called, probes go through untouched.
//
// ProbeFault is safe for concurrent use. Use FaultProbes to create one.
type ProbeFault struct {
	rc         redis.UniversalClient
	hold, lost atomic.Bool
	held       chan *heldProbe // the probe HoldNext held, until MakeBusy takes it
	lostCalls  atomic.Int64    // probes failed since Lose
}

// heldProbe is one probe held back by a ProbeFault.
type heldProbe struct {
	channel string        // the channel it publishes on (its slot is the server's to make busy)
	send    chan struct{} // closed by MakeBusy: the server answers BUSY, send it
	replied chan error    // the probe's reply
	resume  chan struct{} // closed by MakeBusy: the server answers again, go on
}

// FaultProbes adds a ProbeFault to rc, which must be a client of a Server
// (Server.Client), and returns it.
func FaultProbes(rc redis.UniversalClient) *ProbeFault {
	f := &ProbeFault{rc: rc, held: make(chan *heldProbe, 1)}
	rc.AddHook(probeHook{f})
	return f
}

// Lose makes every probe from now on fail with a timeout before it is
// sent, as a probe whose reply was lost. It takes precedence over
// HoldNext.
func (f *ProbeFault) Lose() { f.lost.Store(true) }

// Lost returns how many probes have failed since Lose.
func (f *ProbeFault) Lost() int64 { return f.lostCalls.Load() }

// HoldNext holds back the next probe until MakeBusy has made its server
// answer BUSY, and once it has its reply, until the server answers again.
// The probes after it go through.
//
// WARNING: the held probe, and whatever sent it, waits for MakeBusy; a
// test that calls HoldNext must call MakeBusy.
func (f *ProbeFault) HoldNext() { f.hold.Store(true) }

// MakeBusy waits for the probe HoldNext held, failing tb if ctx ends
// first (what names the probe in the failure). It makes the server of s
// that owns the probe's channel (the one master of a cluster that does)
// answer BUSY while the probe is sent, and answer again before the prober
// goes on; it fails tb unless the probe met BUSY.
func (f *ProbeFault) MakeBusy(tb testing.TB, ctx context.Context, s *Server, what string) {
	tb.Helper()
	p := Recv(tb, ctx, f.held, what)
	addr := s.Addrs()[0]
	if cc, ok := f.rc.(*redis.ClusterClient); ok {
		n, err := cc.MasterForKey(ctx, p.channel)
		if err != nil {
			tb.Fatal(err)
		}
		addr = n.Options().Addr
	}
	stop := Busy(tb, addr)
	close(p.send)
	err := Recv(tb, ctx, p.replied, "the probe's reply")
	stop()
	close(p.resume)
	if err == nil || !strings.HasPrefix(err.Error(), "BUSY") {
		tb.Fatalf("the probe got %v, want BUSY", err)
	}
}

// ForEachProbe runs fn as a subtest on every kind of server with sharded
// pub/sub (Redis 7 and 8, Valkey, the Cluster), as the tests of a probe
// that meets a transient reply do: on the shared server of the kind, or
// on one of the test's own if own (a test that calls MakeBusy, which
// stalls every client of the server). fn gets a context that ends after a
// minute and the stalls of this process (see MeasureStalls).
func ForEachProbe(t *testing.T, own bool, fn func(t *testing.T, ctx context.Context, s *Server, stalls *Stalls)) {
	t.Helper()
	ForEach(t, func(t *testing.T, s *Server) {
		if own {
			s = Start(t, s.Kind)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		fn(t, ctx, s, MeasureStalls(t))
	}, Redis7, Redis8, Valkey, Cluster)
}

// probeHook is the redis.Hook of a ProbeFault, kept apart so that its
// methods are not the ProbeFault's.
type probeHook struct{ f *ProbeFault }

func (h probeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h probeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	f := h.f
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		if len(args) != 3 || !strings.EqualFold(cmd.Name(), "spublish") || args[2] != "" {
			return next(ctx, cmd)
		}
		if f.lost.Load() {
			f.lostCalls.Add(1)
			err := errors.New("i/o timeout (the test lost the probe's reply)")
			cmd.SetErr(err)
			return err
		}
		if !f.hold.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		ch, _ := args[1].(string)
		p := &heldProbe{channel: ch, send: make(chan struct{}), replied: make(chan error, 1), resume: make(chan struct{})}
		f.held <- p
		<-p.send
		err := next(ctx, cmd)
		p.replied <- err
		<-p.resume
		return err
	}
}

func (h probeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
