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
}
