package lock

import (
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
