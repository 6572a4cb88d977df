// This file holds the validator of the soft purge's promise for pages
// (SoftPurgeURL, SoftPurgeTag; middleware/softpurge.go).

package main

import (
	"fmt"
	"slices"
)

// checkSoftPurge: once SoftPurgeURL or SoftPurgeTag of a page has
// returned, a GET that starts afterwards is answered with a render begun
// before the soft purge was called only as stale (X-Cache STALE: served
// while one render refreshes it, or within stale-if-error when that
// render failed), never as a fresh hit — at once without near caches and
// in the purging process, within the near cache's bound in the others.
// Excused, counted: the reader's process failed open, and a soft purge
// made during a takeover of its record's shard. That no page from
// before a hard purge is served after it, soft purges or not, is
// checkPurge's.
func checkSoftPurge(h *history, o checkOptions, res *result) {
	purges := func(r *Record, n int) bool {
		switch r.Kind {
		case kSoftPurgeURL:
			return r.Key == fmt.Sprintf("/p/%d", n)
		case kSoftPurgeTag:
			return slices.Contains(pageTags(n), r.Key)
		}
		return false
	}
	checkPagePurges(h, o, res, "soft-purge", purges, func(r *Record) bool { return r.Cache == "STALE" })
	for i, v := range res.Violations {
		if v.Check == "soft-purge" && len(v.Records) == 2 && v.Records[1].Kind == kSoftPurgeURL && nearHit(v.Records[0]) {
			res.Violations[i].Known = knownSoftURLNear
		}
	}
}

// knownSoftURLNear names the one window of soft purges this suite still
// finds, and issue 40 leaves open: after SoftPurgeURL, in about one run
// in eight of TestShort, a request answered from its process's near cache
// with a render begun a few milliseconds before the purge, as a fresh
// hit, 20 µs to 50 ms after it returned. Not yet explained: the entry
// that render stored should be rewritten stale, or its write refused.
const knownSoftURLNear = "issue 40: a fresh near hit after SoftPurgeURL"

// nearHit reports whether r was answered from its process's near cache.
func nearHit(r *Record) bool {
	for _, fl := range r.Flags {
		if slices.Contains(fl, "nearhit") {
			return true
		}
	}
	return false
}
