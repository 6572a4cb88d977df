// This file holds the validator of the soft purge's promise for pages
// (SoftPurgeURL, SoftPurgeTag; middleware/softpurge.go).

package main

import (
	"fmt"
	"strings"
	"time"
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
	const name = "soft-purge"
	purges := map[int][]*Record{} // by page
	for _, r := range h.ops {
		if r.Return == 0 || r.Err != "" {
			continue
		}
		for n := range httpPages {
			switch {
			case r.Kind == kSoftPurgeURL && r.Key == fmt.Sprintf("/p/%d", n):
				purges[n] = append(purges[n], r)
			case r.Kind == kSoftPurgeTag:
				for _, t := range pageTags(n) {
					if t == r.Key {
						purges[n] = append(purges[n], r)
					}
				}
			}
		}
	}
	ix := map[int]writeIndex{}
	for n, ps := range purges {
		ix[n] = indexWrites(ps)
	}
	for _, r := range h.ops {
		if r.Kind != kHTTP || r.Render == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(r.Key, "/p/%d", &n); err != nil {
			continue
		}
		_, startS, _ := strings.Cut(r.Render, "@")
		var start int64
		fmt.Sscan(startS, &start)
		pix := ix[n]
		p := pix.latestBefore(r.Call)
		if p == nil || p.Call <= start {
			continue
		}
		res.Checked[name]++
		switch {
		case r.Cache == "STALE":
			continue
		case failingOpen(r):
			res.excuse(name, "answered while its process failed open")
			continue
		case r.Near && p.Proc != r.Proc:
			if p2 := pix.latestBefore(r.Call - int64(o.nearBound)); p2 == nil || p2.Call <= start {
				res.excuse(name, "within the near cache's bound")
				continue
			}
		}
		if h.takeoverOf(p.Kind, p.NS, p.Key, p.Call, p.Return) != nil {
			res.excuse(name, "a soft purge a TAKEOVER failover of its shard may have lost")
			continue
		}
		res.violate(name, fmt.Sprintf("GET %s answered (X-Cache %s) with a render begun %s before a %s %s that returned %s before the request: not as stale",
			r.Key, r.Cache, time.Duration(p.Call-start), p.Kind, p.Key, time.Duration(r.Call-p.Return)), r, p)
	}
}
