package lock

import (
	"log/slog"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
)

// DefaultMaxMetadata is the default limit on the metadata of WithMetadata.
const DefaultMaxMetadata = 64 << 10

// Options configure a Client. A nil *Options means all defaults.
type Options struct {
	// DigestThreshold is the stored value length (token plus metadata)
	// above which Release and Refresh compare a digest of the value instead
	// of the value itself. Default: 512 bytes.
	DigestThreshold int

	// MaxMetadata is the largest metadata (WithMetadata) accepted; larger
	// metadata is refused before any server call. Default: 64 KiB.
	MaxMetadata int

	// Logger receives warnings about locks lost while their work ran (Do,
	// RunOnce, KeepAlive), locks found expired or taken at Release or
	// Refresh, failed refreshes and failed server calls, each naming the
	// key. Obtaining and releasing a lock log nothing, except one warning
	// per Client when the server refuses what hand-off needs (see
	// WithRetry): waiters then poll. Default: nil, no logging.
	Logger *slog.Logger

	// Observer, if set, is called for every Event (see Event for which),
	// synchronously and outside any lock. It must be safe for concurrent
	// use: the keep-alive of Do and KeepAlive reports from its own
	// goroutine while the work may call the Client. It must be fast and must not
	// block, since Obtain, Release and Refresh wait for it, and so does the
	// keep-alive, which must refresh before the lock expires. As in package
	// cache, a panic in Observer is not recovered and reaches the caller of
	// the method that reported the event (after Obtain took the lock, the
	// lock is then left to expire); on the keep-alive's own goroutine it is
	// recovered and logged at Error, and the refreshing goes on.
	// Default: nil.
	Observer func(Event)
}

func (o *Options) digestThreshold() int {
	if o == nil || o.DigestThreshold <= 0 {
		return redisx.DefaultDigestThreshold
	}
	return o.DigestThreshold
}

func (o *Options) maxMetadata() int {
	if o == nil || o.MaxMetadata <= 0 {
		return DefaultMaxMetadata
	}
	return o.MaxMetadata
}

func (o *Options) logger() *slog.Logger {
	if o == nil {
		return nil
	}
	return o.Logger
}

func (o *Options) observer() func(Event) {
	if o == nil {
		return nil
	}
	return o.Observer
}

func (o *Options) validate() error {
	if o == nil {
		return nil
	}
	if o.DigestThreshold < 0 {
		return invalid("DigestThreshold %d is negative", o.DigestThreshold)
	}
	if o.MaxMetadata < 0 {
		return invalid("MaxMetadata %d is negative", o.MaxMetadata)
	}
	return nil
}

// Option changes one call's settings: Obtain, Do or RunOnce, as each
// constructor says. A nil Option is skipped, so Obtain(ctx, key, ttl, nil)
// means all defaults. An Option given to a call it does not apply to (such
// as WithMinHold to Obtain) makes the call return an error wrapping
// ErrInvalid, before any server call. An Option keeps no state of its own:
// one value may be given to many calls, also concurrently.
type Option func(*callSettings)

// callSettings are one call's settings, gathered from its Options.
type callSettings struct {
	retry        RetryStrategy
	maxWait      time.Duration
	metadata     string
	fencing      bool
	refreshEvery time.Duration
	minHold      time.Duration
	given        optionSet // the options given, to refuse those that do not apply
}

// optionSet is a set of Option constructors, one bit each.
type optionSet uint8

const (
	optRetry optionSet = 1 << iota
	optMaxWait
	optMetadata
	optFencing
	optRefreshEvery
	optMinHold

	// What each call accepts.
	obtainAccepts  = optRetry | optMaxWait | optMetadata | optFencing
	doAccepts      = obtainAccepts | optRefreshEvery
	runOnceAccepts = optMetadata | optFencing | optMinHold
)

// WithRetry says how Obtain and Do wait for a held lock. Default: no
// retry, one attempt (as is a nil RetryStrategy). It does not apply to
// RunOnce, which never waits.
//
// With a retry, a waiter queues and is handed the lock by the release of a
// lock that was itself obtained with a retry, woken by a notification; its
// polls, paced by r, are the safety net (see the package doc, "Waiting:
// hand-off and wake-up"). Such a lock's Release runs a script that checks
// the queue.
func WithRetry(r RetryStrategy) Option {
	return func(s *callSettings) { s.retry, s.given = r, s.given|optRetry }
}

// WithMaxWait bounds the time Obtain and Do spend retrying (see WithRetry).
// It must not be negative; zero means the default: the context's deadline,
// or the lock's TTL when the context has none. It does not apply to
// RunOnce.
func WithMaxWait(d time.Duration) Option {
	return func(s *callSettings) { s.maxWait, s.given = d, s.given|optMaxWait }
}

// WithMetadata stores meta with the lock's token, e.g. who holds the lock,
// for anyone to read with Inspect (Info.Metadata) and the holder with
// Lock.Metadata. It is refused when longer than Options.MaxMetadata.
// Default: empty. It applies to Obtain, Do and RunOnce.
func WithMetadata(meta string) Option {
	return func(s *callSettings) { s.metadata, s.given = meta, s.given|optMetadata }
}

// WithFencing draws a fencing number with the acquisition; see Lock.Fence.
// The counter lives in a companion key in the same cluster slot (see
// FenceKey), without expiry. It needs scripting (EVALSHA/EVAL) on the
// server. Default: no fencing, Lock.Fence is 0. It applies to Obtain, Do
// and RunOnce.
func WithFencing() Option {
	return func(s *callSettings) { s.fencing, s.given = true, s.given|optFencing }
}

// WithRefreshEvery sets how often Do refreshes the lock back to its full
// TTL while the work runs. It must be at least 1ms and below the TTL.
// Default (or zero): a third of the TTL. It applies to Do only.
func WithRefreshEvery(d time.Duration) Option {
	return func(s *callSettings) { s.refreshEvery, s.given = d, s.given|optRefreshEvery }
}

// WithMinHold keeps RunOnce's lock at least d after it was obtained
// (counted from the reply, so that a slow obtain does not shorten it), even
// when the job finishes sooner, so that an instance whose clock (or
// scheduler) is a little behind does not run the same tick again
// (ShedLock's lockAtLeastFor). It must be between 0 and RunOnce's maxHold.
// Default: 0, the lock is released when the job ends. It applies to
// RunOnce only.
func WithMinHold(d time.Duration) Option {
	return func(s *callSettings) { s.minHold, s.given = d, s.given|optMinHold }
}

// gather applies opts, skipping nil ones, for the call named call, which
// accepts the options in accepts; an option outside them is an error.
func gather(call string, accepts optionSet, opts []Option) (*callSettings, error) {
	s := &callSettings{}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	for bit := optRetry; bit <= optMinHold; bit <<= 1 {
		if s.given&bit != 0 && accepts&bit == 0 {
			name, calls := bit.describe()
			return nil, invalid("%s applies to %s, not %s", name, calls, call)
		}
	}
	return s, nil
}

// describe returns the name of the one option in o and the calls it
// applies to.
func (o optionSet) describe() (name, calls string) {
	switch o {
	case optRetry:
		return "WithRetry", "Obtain and Do"
	case optMaxWait:
		return "WithMaxWait", "Obtain and Do"
	case optRefreshEvery:
		return "WithRefreshEvery", "Do"
	case optMinHold:
		return "WithMinHold", "RunOnce"
	case optMetadata:
		return "WithMetadata", "Obtain, Do and RunOnce"
	}
	return "WithFencing", "Obtain, Do and RunOnce"
}
