// This file holds the validator of the backend cap (cache.Options.Backends,
// docs/backends.md): the loads of namespace exp, which every worker caps
// at the same number, never run more at once than that, across every
// process.

package main

import (
	"cmp"
	"fmt"
	"slices"
)

// checkCap: at no instant do more than o.cap loader runs of namespace exp
// run at once, in all processes together. A run is counted from its call
// to its return, both inside the permit the cache holds for it (taken
// before the loader, given back after). Not counted: runs failing open
// (the cap needs the server; docs/backends.md) and runs whose process
// crashed before they returned (their permit stays taken until its TTL,
// which keeps the others out). Excused, counted: an instant above the cap
// when a fault of the server or of a running load's process, or a pause
// at a failpoint where a permit is not kept alive, came during one of
// the runs then (a permit lost, or a load let through uncapped after a
// server error while taking one: both documented).
func checkCap(h *history, o checkOptions, res *result) {
	const name = "cap"
	if o.cap <= 0 {
		return
	}
	var runs []*Record
	for _, l := range h.loads {
		if l.NS == "exp" && l.Return != 0 && !h.failOpen(l) {
			runs = append(runs, l)
		}
	}
	// Sweep the starts in order, with the runs still going at each.
	slices.SortFunc(runs, func(a, b *Record) int { return cmp.Compare(a.Call, b.Call) })
	var going []*Record
	for _, r := range runs {
		going = slices.DeleteFunc(going, func(g *Record) bool { return g.Return < r.Call })
		going = append(going, r)
		res.Checked[name]++
		if len(going) <= o.cap {
			continue
		}
		if capExcused(h, going) {
			res.excuse(name, "a fault or failpoint pause during one of the runs")
			continue
		}
		res.violate(name, fmt.Sprintf("%d loader runs of exp at once, over the cap of %d", len(going), o.cap), slices.Clone(going)...)
	}
}

// capExcused reports whether a fault, or a pause that can cost a permit,
// came during one of runs, in its process or the server's.
func capExcused(h *history, runs []*Record) bool {
	for _, r := range runs {
		if h.faulted(r.Call-int64(lockTTL), r.Return, r.Proc) {
			return true
		}
	}
	return false
}
