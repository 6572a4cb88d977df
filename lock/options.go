package lock

import (
	"github.com/hotkv/stampede/internal/redisx"
)

// RedisClient is what New accepts: any go-redis v9 UniversalClient
// (*redis.Client, including failover clients, *redis.ClusterClient,
// *redis.Ring) or anything else with these methods.
type RedisClient = redisx.Client

// Capabilities reports which command the client uses for each operation on
// its server; see (*Client).Capabilities.
type Capabilities = redisx.Capabilities

// Strategies, for reading Capabilities and for forcing one with
// Options.Capabilities.
type (
	ReleaseStrategy = redisx.ReleaseStrategy
	ExtendStrategy  = redisx.ExtendStrategy
	DigestStrategy  = redisx.DigestStrategy
)

const (
	ReleaseLua     = redisx.ReleaseLua
	ReleaseDelIfEq = redisx.ReleaseDelIfEq
	ReleaseDelex   = redisx.ReleaseDelex
	ExtendLua      = redisx.ExtendLua
	ExtendSetIfEq  = redisx.ExtendSetIfEq
	DigestLua      = redisx.DigestLua
	DigestNative   = redisx.DigestNative
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

	// Capabilities, when non-nil, fixes the strategies instead of probing
	// the server. Meant for tests (to run every strategy on every server)
	// and for servers whose probe answers cannot be trusted. A strategy the
	// server refuses at run time is still downgraded. Default: nil (probe).
	Capabilities *Capabilities
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
