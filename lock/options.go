package lock

import (
	"log/slog"
	"time"

	"github.com/hotkv/stampede/internal/redisx"
)

// defaultMaxMetadata is the default of Options.MaxMetadata.
const defaultMaxMetadata = 64 << 10

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
		return defaultMaxMetadata
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
		return invalid("Options.DigestThreshold %d is negative", o.DigestThreshold)
	}
	if o.MaxMetadata < 0 {
		return invalid("Options.MaxMetadata %d is negative", o.MaxMetadata)
	}
	return nil
}

// ObtainOption is an option of Obtain: WithRetry, WithMaxWait,
// WithMetadata or WithFencing (see the package doc, "Per-call options").
type ObtainOption interface{ applyObtain(*callSettings) }

// DoOption is an option of Do: WithRetry, WithMaxWait, WithMetadata,
// WithFencing or WithRefreshEvery.
type DoOption interface{ applyDo(*callSettings) }

// RunOnceOption is an option of RunOnce: WithMetadata, WithFencing or
// WithMinHold.
type RunOnceOption interface{ applyRunOnce(*callSettings) }

// WaitOption is an option of Obtain and Do, which wait for a held lock:
// WithRetry and WithMaxWait return one. RunOnce never waits.
type WaitOption interface {
	ObtainOption
	DoOption
}

// Option is an option of every call (Obtain, Do and RunOnce):
// WithMetadata and WithFencing return one.
type Option interface {
	ObtainOption
	DoOption
	RunOnceOption
}

// The options' own types, one per set of calls: each is a change of one
// call's settings, with the methods of the calls it applies to.
type (
	waitSetting    func(*callSettings) // Obtain, Do
	commonSetting  func(*callSettings) // Obtain, Do, RunOnce
	doSetting      func(*callSettings) // Do
	runOnceSetting func(*callSettings) // RunOnce
)

func (f waitSetting) applyObtain(s *callSettings)     { f(s) }
func (f waitSetting) applyDo(s *callSettings)         { f(s) }
func (f commonSetting) applyObtain(s *callSettings)   { f(s) }
func (f commonSetting) applyDo(s *callSettings)       { f(s) }
func (f commonSetting) applyRunOnce(s *callSettings)  { f(s) }
func (f doSetting) applyDo(s *callSettings)           { f(s) }
func (f runOnceSetting) applyRunOnce(s *callSettings) { f(s) }

// callSettings are one call's settings, gathered from its options.
type callSettings struct {
	retry        RetryStrategy
	maxWait      time.Duration
	metadata     string
	fencing      bool
	refreshEvery time.Duration
	minHold      time.Duration
}

// WithRetry says how Obtain and Do wait for a held lock. Default: no
// retry, one attempt (as is a nil RetryStrategy). It is not an option of
// RunOnce, which never waits.
//
// With a retry, a waiter queues and is handed the lock by the release of a
// lock that was itself obtained with a retry, woken by a notification; its
// polls, paced by r, are the safety net (see the package doc, "Waiting:
// hand-off and wake-up"). Such a lock's Release runs a script that checks
// the queue.
func WithRetry(r RetryStrategy) WaitOption {
	return waitSetting(func(s *callSettings) { s.retry = r })
}

// WithMaxWait bounds the time Obtain and Do spend retrying (see WithRetry).
// It must not be negative; zero means the default: the context's deadline,
// or the lock's TTL when the context has none. It is not an option of
// RunOnce.
func WithMaxWait(d time.Duration) WaitOption {
	return waitSetting(func(s *callSettings) { s.maxWait = d })
}

// WithMetadata stores meta with the lock's token, e.g. who holds the lock,
// for anyone to read with Inspect (Info.Metadata) and the holder with
// Lock.Metadata. It is refused when longer than Options.MaxMetadata.
// Default: empty. It is an option of Obtain, Do and RunOnce.
func WithMetadata(meta string) Option {
	return commonSetting(func(s *callSettings) { s.metadata = meta })
}

// WithFencing draws a fencing number with the acquisition; see Lock.Fence.
// The counter lives in a companion key in the same cluster slot (see
// FenceKey), without expiry. It needs scripting (EVALSHA/EVAL) on the
// server. Default: no fencing, Lock.Fence is 0. It is an option of Obtain,
// Do and RunOnce.
func WithFencing() Option {
	return commonSetting(func(s *callSettings) { s.fencing = true })
}

// WithRefreshEvery sets how often Do refreshes the lock back to its full
// TTL while the work runs. It must be at least 1ms and below the TTL.
// Default (or zero): a third of the TTL. It is an option of Do only.
func WithRefreshEvery(d time.Duration) DoOption {
	return doSetting(func(s *callSettings) { s.refreshEvery = d })
}

// WithMinHold keeps RunOnce's lock at least d after it was obtained
// (counted from the reply, so that a slow obtain does not shorten it), even
// when the job finishes sooner, so that an instance whose clock (or
// scheduler) is a little behind does not run the same tick again
// (ShedLock's lockAtLeastFor). It must be between 0 and RunOnce's maxHold.
// Default: 0, the lock is released when the job ends. It is an option of
// RunOnce only.
func WithMinHold(d time.Duration) RunOnceOption {
	return runOnceSetting(func(s *callSettings) { s.minHold = d })
}

// obtainSettings gathers the settings of an Obtain from opts, skipping nil
// ones; doSettings and runOnceSettings those of a Do and a RunOnce.
func obtainSettings(opts []ObtainOption) *callSettings {
	s := &callSettings{}
	for _, o := range opts {
		if o != nil {
			o.applyObtain(s)
		}
	}
	return s
}

func doSettings(opts []DoOption) *callSettings {
	s := &callSettings{}
	for _, o := range opts {
		if o != nil {
			o.applyDo(s)
		}
	}
	return s
}

func runOnceSettings(opts []RunOnceOption) *callSettings {
	s := &callSettings{}
	for _, o := range opts {
		if o != nil {
			o.applyRunOnce(s)
		}
	}
	return s
}
