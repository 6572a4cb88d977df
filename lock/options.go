package lock

import (
	"log/slog"

	"github.com/hotkv/stampede/internal/redisx"
)

// DefaultMaxMetadata is the default limit on ObtainOptions.Metadata.
const DefaultMaxMetadata = 64 << 10

// Options configure a Client. A nil *Options means all defaults.
type Options struct {
	// DigestThreshold is the stored value length (token plus metadata)
	// above which Release and Refresh compare a digest of the value instead
	// of the value itself. Default: 512 bytes.
	DigestThreshold int

	// MaxMetadata is the largest ObtainOptions.Metadata accepted; larger
	// metadata is refused before any server call. Default: 64 KiB.
	MaxMetadata int

	// Logger receives warnings about locks lost while their work ran (Do,
	// RunOnce, KeepAlive), locks found expired or taken at Release or
	// Refresh, failed refreshes and failed server calls, each naming the
	// key. Obtaining and releasing a lock log nothing, except one warning
	// per Client when the server refuses what hand-off needs (see
	// ObtainOptions.Retry): waiters then poll. Default: nil, no logging.
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
