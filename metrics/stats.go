package metrics

import "github.com/hotkv/stampede/cache"

// StatsField is one field of cache.Stats that no cache.Event carries,
// for an adapter to report as a metric of its own.
type StatsField struct {
	// Name is the metric's name under the cache subsystem, its parts
	// joined by dots (OpenTelemetry's "stampede.cache." + Name;
	// Prometheus joins them with underscores and adds "_total" to
	// counters).
	Name string
	// Help describes the metric.
	Help string
	// Gauge says the value is a level, not a count that only grows.
	Gauge bool
	// Value reads the field.
	Value func(cache.Stats) uint64
}

// StatsFields returns the cache.Stats fields that no cache.Event carries:
// coalesced, served, waits, lock_contention, announce_denied,
// near.invalidations, near.flushes, the gauge near.entries and
// backend_waits, in that order. Each call returns a new slice.
func StatsFields() []StatsField {
	return []StatsField{
		{Name: "coalesced", Help: "Calls that joined a load or wait already running in this process (cache.Stats.Coalesced).",
			Value: func(s cache.Stats) uint64 { return s.Coalesced }},
		{Name: "served", Help: "Calls answered by a load (this process's, or another's they waited for) rather than by a stored value; summed over processes and divided by the loads, the fleet's callers per load (cache.Stats.Served).",
			Value: func(s cache.Stats) uint64 { return s.Served }},
		{Name: "waits", Help: "Flights that waited for another process's load, however the wait ended (cache.Stats.Waits).",
			Value: func(s cache.Stats) uint64 { return s.Waits }},
		{Name: "lock_contention", Help: "Rebuild locks found held by another process (cache.Stats.LockContention).",
			Value: func(s cache.Stats) uint64 { return s.LockContention }},
		{Name: "announce_denied", Help: "SUBSCRIBEs and PUBLISHes of announcements the server refused; waiters poll instead (cache.Stats.AnnounceDenied).",
			Value: func(s cache.Stats) uint64 { return s.AnnounceDenied }},
		{Name: "near.invalidations", Help: "Near-cache entries dropped because their key changed (cache.Stats.NearInvalidations).",
			Value: func(s cache.Stats) uint64 { return s.NearInvalidations }},
		{Name: "near.flushes", Help: "Times the near cache was emptied: tracking lost, lapsed, or nodes changed (cache.Stats.NearFlushes).",
			Value: func(s cache.Stats) uint64 { return s.NearFlushes }},
		{Name: "near.entries", Help: "Entries in the near cache now, otter's estimate (cache.Stats.NearEntries).", Gauge: true,
			Value: func(s cache.Stats) uint64 { return s.NearEntries }},
		{Name: "backend_waits", Help: "Loads that found their backend's permits all held and waited for one (cache.Stats.BackendWaits).",
			Value: func(s cache.Stats) uint64 { return s.BackendWaits }},
	}
}
