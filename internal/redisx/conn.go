package redisx

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultDigestThreshold is the value length above which conditional
// operations compare a digest instead of the value itself.
const DefaultDigestThreshold = 512

// Conn is a Client together with what its server was found to support.
// It is safe for concurrent use. Use NewConn to create a Conn, and Close
// to stop the re-probes it runs in the background.
type Conn struct {
	c         Client
	threshold int
	scripts   scripts
	batch     *Batcher // the lock commands: SET NX, and the releases

	caps   atomic.Pointer[Capabilities] // nil until probed; only ever downgraded until the next probe
	probed atomic.Pointer[Capabilities] // the last probe's answer, as stored in caps (caps differs once downgraded)
	probeM sync.Mutex                   // serialises probes; never held across other calls

	// What the server offers is learnt again every recheck (Recheck unless
	// SetRecheck changed it), so that a refusal remembered by the probe or
	// a downgrade (an ACL without DELEX or scripts, a proxy, a server
	// upgraded in place) does not outlive its fix. Forced capabilities are
	// kept.
	forced        bool
	recheck       atomic.Int64 // ns
	probedAt      atomic.Int64 // Unix ns of the last probe that answered, or of the last failed re-probe
	slotsReloaded atomic.Int64 // Unix ns of ReloadSlots' last reload request, or 0

	// The re-probes run beside a call (see reprobeBeside) are the Conn's:
	// Close cancels them and waits for them.
	bgMu   sync.Mutex     // guards closed and bg.Add
	closed bool           // set by Close: no re-probe starts beside a call
	bg     sync.WaitGroup // the re-probes running beside a call
	base   context.Context
	cancel context.CancelFunc // cancels base, ending the re-probes
}

// NewConn wraps c. A non-nil forced, or c being a *Forced, fixes the
// strategies instead of probing the server (tests use it to run every
// strategy on every server). Values longer than threshold bytes are
// compared by digest; threshold <= 0 means DefaultDigestThreshold.
func NewConn(c Client, forced *Capabilities, threshold int) *Conn {
	c, forced = unforce(c, forced)
	if threshold <= 0 {
		threshold = DefaultDigestThreshold
	}
	cn := &Conn{c: c, threshold: threshold, scripts: newScripts(), batch: NewBatcher(c)}
	cn.recheck.Store(int64(Recheck))
	cn.base, cn.cancel = context.WithCancel(context.Background())
	if forced != nil {
		f := *forced
		cn.caps.Store(&f)
		cn.forced = true
	}
	return cn
}

// SetRecheck sets how long what the server offers is kept before it is
// probed again (Recheck by default). Tests shorten it.
func (cn *Conn) SetRecheck(d time.Duration) { cn.recheck.Store(int64(d)) }

// Recheck returns how long a remembered refusal stands (see SetRecheck);
// the callers that remember refusals of their own use it too.
func (cn *Conn) Recheck() time.Duration { return time.Duration(cn.recheck.Load()) }

// Client returns the wrapped client.
func (cn *Conn) Client() Client { return cn.c }

// Capabilities returns the server's capabilities, probing the server on the
// first call (on a key starting "stampede:probe:"). A failed probe is not
// remembered: the next call tries again.
func (cn *Conn) Capabilities(ctx context.Context) (Capabilities, error) {
	return cn.probeWith(ctx, "stampede:probe:")
}

// CapabilitiesFor is Capabilities for an operation on key: a first probe uses a
// key starting with key, which an ACL that lets the user at key lets it at
// too.
func (cn *Conn) CapabilitiesFor(ctx context.Context, key string) (Capabilities, error) {
	return cn.probeWith(ctx, key+":probe:")
}

func (cn *Conn) probeWith(ctx context.Context, prefix string) (Capabilities, error) {
	if p := cn.caps.Load(); p != nil {
		if cn.forced || time.Since(time.Unix(0, cn.probedAt.Load())) < time.Duration(cn.recheck.Load()) || !cn.probeM.TryLock() {
			return *p, nil // fresh, or another caller re-probes: keep using what was learnt
		}
		if cn.healthy(p) {
			// Nothing refused or downgraded: the probe can only confirm
			// what this call uses (a server that lost a command refuses
			// it, and the command's own refusal downgrades). It runs
			// beside the call, which costs its round trips and no more.
			cn.reprobeBeside(ctx, prefix, p)
			return *p, nil
		}
		// A refusal or a downgrade is remembered: this call may be the
		// one it fails, so the probe that may lift it comes first.
		defer cn.probeM.Unlock()
		return cn.reprobe(ctx, prefix, p), nil
	}
	cn.probeM.Lock()
	defer cn.probeM.Unlock()
	if p := cn.caps.Load(); p != nil {
		return *p, nil
	}
	caps, err := probe(ctx, cn.c, prefix)
	if err != nil {
		return Capabilities{}, err
	}
	cn.probedAt.Store(time.Now().UnixNano())
	cn.store(&caps)
	return caps, nil
}

// reprobeTimeout bounds a re-probe run beside the call that found the
// capabilities due (see probeWith).
const reprobeTimeout = 5 * time.Second

// reprobeBeside runs the re-probe of p, which probeWith found due with
// probeM locked, in the background: on the context of the call (ctx, for
// its values, not its cancellation), limited by reprobeTimeout and
// cancelled by Close. It unlocks probeM when the re-probe ends, or at
// once after Close, which it starts none after.
func (cn *Conn) reprobeBeside(ctx context.Context, prefix string, p *Capabilities) {
	cn.bgMu.Lock()
	defer cn.bgMu.Unlock()
	if cn.closed {
		cn.probeM.Unlock()
		return
	}
	cn.bg.Add(1)
	go func() {
		defer cn.bg.Done()
		defer cn.probeM.Unlock()
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reprobeTimeout)
		defer cancel()
		stop := context.AfterFunc(cn.base, cancel)
		defer stop()
		cn.reprobe(pctx, prefix, p)
	}()
}

// Close cancels the re-probes running in the background (see
// reprobeBeside) and waits for them to return; none starts after it. A
// re-probe that waits for a connection ends at once; one whose commands
// were sent returns with their replies, as go-redis abandons a read only
// at a deadline (the client's ReadTimeout), not when its context is
// cancelled. The Conn's other calls work as before Close, with what was
// learnt until then (a probe that a call needs runs in the call). Close
// is idempotent and safe for concurrent use.
func (cn *Conn) Close() {
	cn.bgMu.Lock()
	cn.closed = true
	cn.bgMu.Unlock()
	cn.cancel()
	cn.bg.Wait()
}

// reprobe probes the server again, under probeM, and returns what the
// Conn uses now: the probe's answer, or old when the probe failed (asked
// too early, or the server is busy: what was learnt stands until the
// next Recheck).
func (cn *Conn) reprobe(ctx context.Context, prefix string, old *Capabilities) Capabilities {
	caps, err := probe(ctx, cn.c, prefix)
	cn.probedAt.Store(time.Now().UnixNano())
	if err != nil {
		return *old
	}
	cn.store(&caps)
	return caps
}

// store makes caps, a probe's answer, what the Conn uses.
func (cn *Conn) store(caps *Capabilities) {
	cn.probed.Store(caps)
	cn.caps.Store(caps)
}

// healthy reports whether p is a probe's answer, not downgraded since,
// with nothing refused to the client's user.
func (cn *Conn) healthy(p *Capabilities) bool {
	return p == cn.probed.Load() && p.ScriptsDenied == "" && p.ACLRefused == ""
}

// downgrade replaces the capabilities with change(current), unless another
// goroutine changed them first (then that change stands).
func (cn *Conn) downgrade(change func(*Capabilities)) {
	for {
		old := cn.caps.Load()
		if old == nil {
			return
		}
		next := *old
		change(&next)
		if cn.caps.CompareAndSwap(old, &next) {
			return
		}
	}
}

func (cn *Conn) large(v string) bool { return len(v) > cn.threshold }

// SetNX sets key to value, expiring after ttl, if key does not exist
// (SET NX PX), sent with the concurrent calls of this Conn (see Batcher).
// It reports whether it did.
func (cn *Conn) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	cmd := redis.NewBoolCmd(ctx, "set", key, value, "px", ttl.Milliseconds(), "nx")
	_ = cn.batch.Do(ctx, cmd)
	return cmd.Result()
}

// batched sends one command with the concurrent calls of this Conn.
func (cn *Conn) batched(ctx context.Context, args ...any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	_ = cn.batch.Do(ctx, cmd)
	return cmd
}

// batchedScript runs s as EVALSHA with the concurrent calls of this
// Conn; a server that does not have the script yet gets it on its own, as
// redis.Script.Run sends it.
func (cn *Conn) batchedScript(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", s.Hash(), len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	cmd := cn.batched(ctx, append(a, args...)...)
	if isNoScript(cmd.Err()) {
		return s.Run(ctx, cn.c, keys, args...)
	}
	return cmd
}

// DeleteIfEqual deletes key if it holds value. It reports whether it did.
func (cn *Conn) DeleteIfEqual(ctx context.Context, key, value string) (bool, error) {
	caps, err := cn.CapabilitiesFor(ctx, key)
	if err != nil {
		return false, err
	}
	for {
		var n int64
		var err error
		switch {
		case cn.large(value) && caps.Digest == DigestNative:
			n, err = cn.c.Do(ctx, "DELEX", key, "IFDEQ", Digest(value)).Int64()
			if IsRefused(err) {
				cn.downgrade(func(c *Capabilities) { c.Digest = DigestLua })
				caps.Digest = DigestLua
				continue
			}
		case cn.large(value):
			if err := cn.scriptDenied(caps, OpRelease, len(value)); err != nil {
				return false, err
			}
			n, err = cn.scripts.delIfEq.Run(ctx, cn.c, []string{key}, SHA1Hex(value), "sha1").Int64()
			err = cn.scriptErr(caps, OpRelease, len(value), err)
		case caps.Release == ReleaseDelex:
			n, err = cn.batched(ctx, "DELEX", key, "IFEQ", value).Int64()
			if IsRefused(err) {
				next := ReleaseLua
				if caps.DelIfEq {
					next = ReleaseDelIfEq
				}
				cn.downgrade(func(c *Capabilities) { c.Release = next })
				caps.Release = next
				continue
			}
		case caps.Release == ReleaseDelIfEq:
			n, err = cn.batched(ctx, "DELIFEQ", key, value).Int64()
			if IsRefused(err) {
				cn.downgrade(func(c *Capabilities) { c.Release, c.DelIfEq = ReleaseLua, false })
				caps.Release = ReleaseLua
				continue
			}
		default:
			if err := cn.scriptDenied(caps, OpRelease, len(value)); err != nil {
				return false, err
			}
			n, err = cn.batchedScript(ctx, cn.scripts.delIfEq, []string{key}, value, "").Int64()
			err = cn.scriptErr(caps, OpRelease, len(value), err)
		}
		if err != nil {
			return false, Denied("release", err, "")
		}
		return n == 1, nil
	}
}

// ExpireIfEqual sets key to expire after ttl if it holds value. It reports
// whether it did. Large values always go through the script: the native
// form (SET ... IFDEQ) would have to send the value back.
//
// Where the server refuses scripts, a large value is compared by digest
// with SET ... IFDEQ (Redis >= 8.4), which sends the value back.
func (cn *Conn) ExpireIfEqual(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	caps, err := cn.CapabilitiesFor(ctx, key)
	if err != nil {
		return false, err
	}
	ms := ttl.Milliseconds()
	var cmd []any
	switch {
	case caps.Extend == ExtendSetIfEq && !cn.large(value):
		cmd = []any{"SET", key, value, "IFEQ", value, "PX", ms}
	case caps.Digest == DigestNative && cn.large(value) && caps.ScriptsDenied != "":
		cmd = []any{"SET", key, value, "IFDEQ", Digest(value), "PX", ms}
	}
	if cmd != nil {
		// With the concurrent calls of this Conn: many locks' writes and
		// refreshes go out together.
		err := cn.batched(ctx, cmd...).Err()
		switch {
		case err == nil:
			return true, nil
		case IsNil(err):
			return false, nil
		case IsRefused(err) && cmd[3] == "IFEQ":
			cn.downgrade(func(c *Capabilities) { c.Extend = ExtendLua })
			caps.Extend = ExtendLua
		case IsRefused(err):
			cn.downgrade(func(c *Capabilities) { c.Digest = DigestLua })
			caps.Digest = DigestLua
		default:
			return false, Denied("refresh", err, "")
		}
	}
	if err := cn.scriptDenied(caps, OpExtend, len(value)); err != nil {
		return false, err
	}
	want, mode := cn.expect(value)
	n, err := cn.scripts.pexpireIfEq.Run(ctx, cn.c, []string{key}, want, mode, ms).Int64()
	if err != nil {
		return false, cn.scriptErr(caps, OpExtend, len(value), err)
	}
	return n == 1, nil
}

// TTLIfEqual returns the remaining time to live of key if it holds value;
// ok is false if it does not. A key without expiry reports -1.
//
// value must be one that nobody else writes (a lock value carries a random
// token): where a script cannot be used, or where the comparison needs no
// script (a small value, or a server with DIGEST), the answer is one
// pipeline of read, PTTL, read, and a value that is there before and after
// the PTTL was there during it.
func (cn *Conn) TTLIfEqual(ctx context.Context, key, value string) (ttl time.Duration, ok bool, err error) {
	caps, err := cn.CapabilitiesFor(ctx, key)
	if err != nil {
		return 0, false, err
	}
	var n int64
	if !cn.large(value) || caps.Digest == DigestNative || caps.ScriptsDenied != "" {
		n, err = cn.ttlPipeline(ctx, caps, key, value)
	} else {
		want, mode := cn.expect(value)
		n, err = cn.scripts.pttlIfEq.Run(ctx, cn.c, []string{key}, want, mode).Int64()
		if isScriptRefusal(err) {
			cn.downgrade(func(c *Capabilities) { c.ScriptsDenied = err.Error() })
			n, err = cn.ttlPipeline(ctx, caps, key, value)
		}
	}
	switch {
	case err != nil:
		return 0, false, Denied("ttl", err, "")
	case n == -3 || n == -2:
		return 0, false, nil
	case n == -1:
		return -1, true, nil
	}
	return time.Duration(n) * time.Millisecond, true, nil
}

// ttlPipeline answers TTLIfEqual without a script: the PTTL of key, or -3
// when key does not hold value before and after it.
func (cn *Conn) ttlPipeline(ctx context.Context, caps Capabilities, key, value string) (int64, error) {
	read := func(p redis.Pipeliner) func() (bool, error) {
		if cn.large(value) && caps.Digest == DigestNative {
			cmd := p.Do(ctx, "DIGEST", key)
			return func() (bool, error) {
				v, err := cmd.Text()
				if IsNil(err) || isWrongType(err) {
					return false, nil
				}
				return err == nil && v == Digest(value), err
			}
		}
		cmd := p.Get(ctx, key)
		return func() (bool, error) {
			v, err := cmd.Result()
			if IsNil(err) || isWrongType(err) {
				return false, nil
			}
			return err == nil && v == value, err
		}
	}
	pipe := cn.c.Pipeline()
	before := read(pipe)
	pttl := pipe.PTTL(ctx, key)
	after := read(pipe)
	_ = Exec(ctx, pipe) // a failed pipeline's error is on every command
	for _, r := range []func() (bool, error){before, after} {
		same, err := r()
		if err != nil {
			return 0, err
		}
		if !same {
			return -3, nil
		}
	}
	d, err := pttl.Result()
	if err != nil {
		return 0, err
	}
	switch d {
	case -1, -2:
		return int64(d), nil
	}
	return d.Milliseconds(), nil
}

// KeepTTL, as the ttl of SetIfEqual or of a CondSet, keeps the time to
// live the key has (SET … KEEPTTL): the new value expires when the old
// one would have.
const KeepTTL time.Duration = -1

// expiry returns the arguments of SET that give a value ttl (KeepTTL:
// the key's own), and the script's ARGV[4]; ok is false for a ttl below
// 1ms.
func expiry(ttl time.Duration) (args []any, arg any, ok bool) {
	if ttl == KeepTTL {
		return []any{"KEEPTTL"}, "keepttl", true
	}
	ms := ttl.Milliseconds()
	return []any{"PX", ms}, ms, ms >= 1
}

// SetIfEqual replaces key's value with next (expiring after ttl, or when
// the old value would have with KeepTTL) if it holds old. It reports
// whether it did. Large old values are compared by digest (SET ... IFDEQ
// where the server has it), never sent back.
func (cn *Conn) SetIfEqual(ctx context.Context, key, old, next string, ttl time.Duration) (bool, error) {
	caps, err := cn.CapabilitiesFor(ctx, key)
	if err != nil {
		return false, err
	}
	exp, arg, ok := expiry(ttl)
	if !ok {
		return false, fmt.Errorf("redisx: set %q: ttl %v below 1ms", key, ttl)
	}
	var cmd []any
	switch {
	case cn.large(old) && caps.Digest == DigestNative:
		cmd = append([]any{"SET", key, next, "IFDEQ", Digest(old)}, exp...)
	case !cn.large(old) && caps.Extend == ExtendSetIfEq:
		cmd = append([]any{"SET", key, next, "IFEQ", old}, exp...)
	}
	if cmd != nil {
		// With the concurrent calls of this Conn: many locks' writes and
		// refreshes go out together.
		err := cn.batched(ctx, cmd...).Err()
		switch {
		case err == nil:
			return true, nil
		case IsNil(err):
			return false, nil
		case !IsRefused(err):
			return false, Denied("conditional write", err, "")
		}
		if cmd[3] == "IFDEQ" {
			cn.downgrade(func(c *Capabilities) { c.Digest = DigestLua })
			caps.Digest = DigestLua
		} else {
			cn.downgrade(func(c *Capabilities) { c.Extend = ExtendLua })
			caps.Extend = ExtendLua
		}
	}
	if err := cn.scriptDenied(caps, OpSet, len(old)); err != nil {
		return false, err
	}
	want, mode := cn.expect(old)
	n, err := cn.scripts.setIfEq.Run(ctx, cn.c, []string{key}, want, mode, next, arg).Int64()
	if err != nil {
		return false, cn.scriptErr(caps, OpSet, len(old), err)
	}
	return n == 1, nil
}

func isWrongType(err error) bool { return IsReply(err) && strings.HasPrefix(err.Error(), "WRONGTYPE") }

// expect returns what a script compares the stored value with.
func (cn *Conn) expect(value string) (want, mode string) {
	if cn.large(value) {
		return SHA1Hex(value), "sha1"
	}
	return value, ""
}

// ErrNoSlot is returned where two keys must share a Redis Cluster slot and
// cannot.
var ErrNoSlot = errors.New("key has '}' but no hash tag, so no companion key can share its cluster slot")
