package main

import (
	"fmt"

	"github.com/hotkv/stampede/cache"
)

// The announcement designs a run compares.
const (
	// designBroadcast is the design before issue 13, kept as
	// Options.Broadcast: one pub/sub channel per namespace that every
	// Cache subscribes to, so every process gets every write's
	// announcement.
	designBroadcast = "broadcast"
	// designPerKey is the default since issue 13: a write is announced on
	// its key's own channel (SPUBLISH in the key's slot), which only the
	// processes waiting for that key subscribe to.
	designPerKey = "per-key"
)

// designs returns the designs a run compares, in the order it measures
// them.
func designs() []string { return []string{designBroadcast, designPerKey} }

// applyDesign sets in o what selects design.
func applyDesign(design string, o *cache.Options) error {
	switch design {
	case designBroadcast:
		o.Broadcast = true
		return nil
	case designPerKey:
		o.Broadcast = false
		return nil
	}
	return fmt.Errorf("unknown design %q (have %v)", design, designs())
}
