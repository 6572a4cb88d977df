package nemesis

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// Fault names a kind of fault. Faults lists them all.
type Fault string

// The faults, as Run injects them into a server for about d.
const (
	// Busy runs a script that loops on a connection of its own, with
	// busy-reply-threshold lowered to 10 ms, so that every other command
	// but a few (HELLO, AUTH, SCRIPT KILL) is answered "BUSY ...". SCRIPT
	// KILL ends it.
	Busy Fault = "busy"
	// OOM sets maxmemory a quarter under used_memory, with
	// maxmemory-policy noeviction, so that writes are answered "OOM
	// command not allowed ..." and reads still work.
	OOM Fault = "oom"
	// Loading runs DEBUG RELOAD slowed by key-load-delay over some filler
	// keys, so that commands are answered "LOADING ...", and lets it finish
	// quickly after d. The dataset is saved and loaded back unchanged.
	// The server needs the DEBUG command (ServerArgs), else Run returns
	// ErrUnsupported.
	Loading Fault = "loading"
	// Pause stops the server with SIGSTOP and continues it with SIGCONT
	// after d: clients time out meanwhile, and then get their answers. On
	// a Cluster it stops one master, chosen with Options.Rand.
	Pause Fault = "pause"
	// PauseKill stops the server with SIGSTOP, and after d kills it with
	// SIGKILL and starts it again on the same port: clients time out, then
	// lose their connections. What the server had acknowledged survives if
	// it was started with ServerArgs (the append-only file, synced always).
	PauseKill Fault = "pause-kill"
	// ACL takes the write commands, PUBLISH and SPUBLISH away from the
	// ACL users (Options.Users) for d, so that they are answered "NOPERM
	// ...", and then gives the users back their rules. Their connections
	// stay open.
	ACL Fault = "acl"
	// Restart kills the server with SIGKILL and starts it again on the
	// same port at once; d is not used. Clients lose their connections
	// and, for a moment, are refused. What the server had acknowledged
	// survives as with PauseKill.
	Restart Fault = "restart"
	// Failover makes the replica of a Cluster master, chosen with
	// Options.Rand, take over its slots: CLUSTER FAILOVER (graceful: the
	// master stops taking writes until the replica has caught up) or, on
	// a coin flip, CLUSTER FAILOVER TAKEOVER (no agreement: writes the
	// replica had not received are lost, as are those the old master
	// takes until it learns of the new epoch). Run returns once the new
	// master serves, the old one replicates it and every node agrees; d
	// is not used. The Record's Detail names the mode and the slots:
	// "TAKEOVER: 127.0.0.1:7003 took over 127.0.0.1:7000's slots
	// 0-5460; ...". The Record starts when the replica had every write
	// the master had acknowledged (a moment before the failover): a write
	// a takeover lost was acknowledged within the Record. Only a Cluster
	// with replicas (LaunchCluster) can undergo it.
	Failover Fault = "failover"
)

// Faults returns every fault, in the order of the constants.
func Faults() []Fault { return []Fault{Busy, OOM, Loading, Pause, PauseKill, ACL, Restart, Failover} }

// ParseFault returns the fault named s ("busy", "pause-kill", ...).
func ParseFault(s string) (Fault, error) {
	for _, f := range Faults() {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("nemesis: unknown fault %q", s)
}

// Record is when a fault held, for the checker of a recorded history: a
// reply the fault explains is excused within [Start, End].
type Record struct {
	Name string // the fault, as Fault spells it
	// Start is taken just before the first change to the server, End
	// just after it was restored (or Run gave up restoring it), so the
	// interval covers every moment a client could see the fault.
	Start, End time.Time
	Detail     string // what was done, with the values changed and restored
}

// Options configures Run. The zero value (or nil) is ready to use.
type Options struct {
	// Users are the ACL users the acl fault takes write commands from.
	// Default: every user but "default", as ACL USERS lists them when the
	// fault begins.
	Users []string

	// RestoreTimeout bounds ending a fault (SCRIPT KILL, restoring values,
	// restarting, a failover settling), which goes on after ctx ends.
	// Default: 30s.
	RestoreTimeout time.Duration

	// Rand makes the faults' random choices on a Cluster: the master a
	// pause stops, the master a failover replaces and whether it is a
	// takeover. Run uses it on the calling goroutine only. Default: a
	// source seeded at random.
	Rand *rand.Rand
}

func (o *Options) intN(n int) int {
	if o == nil || o.Rand == nil {
		return rand.IntN(n)
	}
	return o.Rand.IntN(n)
}

func (o *Options) restoreTimeout() time.Duration {
	if o == nil || o.RestoreTimeout <= 0 {
		return 30 * time.Second
	}
	return o.RestoreTimeout
}

func (o *Options) users() []string {
	if o == nil {
		return nil
	}
	return o.Users
}

func (o *Options) validate() error {
	if o != nil && o.RestoreTimeout < 0 {
		return errors.New("nemesis: RestoreTimeout is negative")
	}
	return nil
}

// Run injects fault f into srv, holds it for about d and ends it,
// returning once the server is as it found it (configuration values, ACL
// users' rules, the files the fault wrote). It returns the fault's Record
// with every error.
//
// If ctx ends first, the fault is ended at once and Run returns ctx.Err()
// (with the Record); if ctx has ended before Run begins, nothing is done.
// A fault that cannot be injected leaves the server unchanged and returns
// an error; one that cannot be ended returns an error that matches
// ErrNotRestored. A server that cannot undergo f gives ErrUnsupported.
//
// After pause-kill and restart the server is a new process, started with
// the same arguments: Run gives it back the configuration values set at
// run time and the ACL users it had (Launch's ACL file has them there
// before the first connection; without one, logins fail with WRONGPASS
// until Run has restored them, within the Record).
//
// NOTE: Run connects as the default user, without a password.
//
// Run is safe for concurrent use on different servers; faults on one
// server must not overlap.
func Run(ctx context.Context, f Fault, srv *redistest.Server, d time.Duration, o *Options) (Record, error) {
	r := &run{rec: Record{Name: string(f)}, srv: srv, d: d, o: o}
	if err := ctx.Err(); err != nil {
		return r.rec, err
	}
	if err := o.validate(); err != nil {
		return r.rec, err
	}
	if d < 0 {
		return r.rec, fmt.Errorf("nemesis: %s: negative duration %v", f, d)
	}
	var inject func(context.Context) error
	switch f {
	case Busy:
		inject = r.busy
	case OOM:
		inject = r.oom
	case Loading:
		inject = r.loading
	case Pause:
		inject = r.pause
	case PauseKill:
		inject = r.pauseKill
	case ACL:
		inject = r.acl
	case Restart:
		inject = r.restart
	case Failover:
		inject = r.failover
	default:
		return r.rec, fmt.Errorf("nemesis: unknown fault %q", f)
	}
	if err := supported(srv, f); err != nil {
		return r.rec, fmt.Errorf("nemesis: %s: %w", f, err)
	}
	r.addr = srv.Addrs()[0]
	r.admin = newAdmin(r.addr)
	defer func() { _ = r.admin.Close() }()
	err := inject(ctx)
	if !r.rec.Start.IsZero() {
		r.rec.End = time.Now()
	}
	return r.rec, err
}

// run is one call of Run: what a fault reads and fills in.
type run struct {
	rec   Record
	srv   *redistest.Server
	addr  string
	d     time.Duration
	o     *Options
	admin *redis.Client // the default user's; faults that restart the server make a new one
}

// restoreCtx returns the context that ending the fault runs on: ctx's
// values without its cancellation, bounded by Options.RestoreTimeout.
func (r *run) restoreCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.o.restoreTimeout())
}

// hold waits d, or until ctx ends (returning ctx.Err()) or early is
// closed (the fault ended by itself; the caller finds out why).
func hold(ctx context.Context, d time.Duration, early <-chan struct{}) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	case <-early:
		return nil
	}
}

// restoreErr marks err, an error ending fault f, with ErrNotRestored.
func restoreErr(f Fault, err error) error {
	if err == nil {
		return nil
	}
	return errors.Join(ErrNotRestored, fmt.Errorf("nemesis: %s: restore: %w", f, err))
}

// call is a blocking call running on a goroutine of its own (a looping
// script, DEBUG RELOAD). Its starter owns it and waits for done before
// returning, closing the call's client if it must.
type call struct {
	done chan struct{} // closed once err is set
	err  error
}

func goCall(fn func() error) *call {
	c := &call{done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer func() {
			if v := recover(); v != nil {
				c.err = fmt.Errorf("nemesis: panic: %v", v)
			}
		}()
		c.err = fn()
	}()
	return c
}

// waitReply sends PING every millisecond until the server answers with
// an error that starts with prefix ("BUSY", "LOADING"): the sign that a
// fault has taken hold. It fails if c ends first, or after 10 s.
func waitReply(ctx context.Context, admin *redis.Client, prefix string, c *call) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		err := admin.Ping(ctx).Err()
		if hasPrefix(err, prefix) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no %s reply (last: %v): %w", prefix, err, ctx.Err())
		case <-c.done:
			return fmt.Errorf("ended before any %s reply: %v", prefix, c.err)
		case <-tick.C:
		}
	}
}

func hasPrefix(err error, prefix string) bool {
	return err != nil && strings.HasPrefix(err.Error(), prefix)
}
