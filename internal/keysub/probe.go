package keysub

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
	"github.com/redis/go-redis/v9"
)

// Mode is what a Probe knows of the server's pub/sub: which commands a
// per-key channel is published and subscribed with.
type Mode uint8

const (
	// Unknown: the server has not answered the question yet (the last
	// probe met BUSY, LOADING, OOM, a timeout, a broken connection). A
	// subscriber must not subscribe in either mode on it, nor a
	// publisher publish in one mode only: the other processes may know,
	// and use the other.
	Unknown Mode = iota
	// Classic: no sharded pub/sub (an SPUBLISH refused as unknown):
	// PUBLISH and SUBSCRIBE.
	Classic
	// Sharded: sharded pub/sub (Redis and Valkey >= 7): SPUBLISH and
	// SSUBSCRIBE.
	Sharded
)

// String returns "unknown", "classic" or "sharded".
func (m Mode) String() string {
	switch m {
	case Classic:
		return "classic"
	case Sharded:
		return "sharded"
	}
	return "unknown"
}

// Pacing of the callers that met Unknown: they ask again after
// ReprobeMin, doubling up to ReprobeMax (Reprobe), so that once the server
// answers they learn the mode within a step of at most ReprobeMax and a
// round trip, rather than at their poll.
const (
	ReprobeMin = 10 * time.Millisecond
	ReprobeMax = 500 * time.Millisecond
)

// Reprobe returns how long a caller whose last tries probes met Unknown
// waits before it asks again: ReprobeMin, doubling with each try, at most
// ReprobeMax. Zero tries is the first step.
func Reprobe(tries int) time.Duration {
	d := ReprobeMin
	for range min(max(tries, 0), 16) {
		if d *= 2; d >= ReprobeMax {
			return ReprobeMax
		}
	}
	return d
}

// Probe learns whether the server has sharded pub/sub (SPUBLISH and
// SSUBSCRIBE, Redis and Valkey >= 7). The zero value is ready to use; it is
// safe for concurrent use.
type Probe struct {
	// Recheck is how long a Classic answer stands before the server is
	// asked again (a proxy or a server upgraded in place may gain the
	// command). Zero means redisx.Recheck. Set it before the first use.
	Recheck time.Duration

	state atomic.Int32 // Unknown, Classic (kept for Recheck) or Sharded (kept)
	at    atomic.Int64 // when state became Classic (Unix ns)
}

// Doer is what Mode needs of a client.
type Doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// Mode reports what the server has, learnt with an SPUBLISH of an empty
// message on channel (which no subscriber takes for a message). Every
// client of one server learns the same, so publishers and subscribers
// agree, as long as nobody acts on a guess: hence three answers.
//
//   - Sharded is kept: an SPUBLISH that ran, or one the ACL refused (the
//     server has it).
//   - Classic is kept only for a definite refusal (an unknown command, see
//     redisx.IsRefusal), and only for Recheck; then the server is asked
//     again.
//   - Unknown is any other error (BUSY, OOM, LOADING, a timeout, a broken
//     connection): a fact about this moment, kept for nothing. The next
//     call asks again; see Unknown for what a caller must not do with it,
//     and Reprobe for when to ask again.
//
// A Classic answer still standing, or a Sharded one, costs no server call.
func (p *Probe) Mode(ctx context.Context, c Doer, channel string) Mode {
	if m := p.Known(); m != Unknown {
		return m
	}
	err := c.Do(ctx, "SPUBLISH", channel, "").Err()
	switch {
	case err == nil || redisx.IsNoPerm(err):
		p.state.Store(int32(Sharded))
		return Sharded
	case redisx.IsRefusal(err):
		p.at.Store(time.Now().UnixNano())
		p.state.CompareAndSwap(int32(Unknown), int32(Classic))
		return Mode(p.state.Load())
	}
	return Unknown
}

// Known returns what the probe knows now, without asking the server:
// Unknown also when a Classic answer is older than Recheck.
func (p *Probe) Known() Mode {
	switch m := Mode(p.state.Load()); m {
	case Sharded:
		return Sharded
	case Classic:
		if time.Since(time.Unix(0, p.at.Load())) < p.recheck() {
			return Classic
		}
	}
	return Unknown
}

func (p *Probe) recheck() time.Duration {
	if p.Recheck > 0 {
		return p.Recheck
	}
	return redisx.Recheck
}
