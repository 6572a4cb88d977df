// This file holds the checker: every validator a history must pass, each
// a promise the docs make, and what each counts (checked, excused by a
// window the docs name, violated).

package main

import (
	"fmt"

	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
)

// violation is one broken promise, with the records that show it.
type violation struct {
	Check   string    `json:"check"`
	Known   string    `json:"known,omitzero"` // the open issue that names this window, if any
	Message string    `json:"message"`
	Records []*Record `json:"records"`
}

// result is what the checker found.
type result struct {
	Checked    map[string]int `json:"checked"` // per check, the cases it looked at
	Excused    map[string]int `json:"excused"` // per check and reason, the cases a documented window excuses
	Violations []violation    `json:"violations"`
	Lin        []linFailure   `json:"-"`
}

func (res *result) violate(check string, msg string, recs ...*Record) {
	res.Violations = append(res.Violations, violation{Check: check, Message: msg, Records: recs})
}

// failures are the violations no open issue names: those fail a run.
func (res *result) failures() []violation {
	var out []violation
	for _, v := range res.Violations {
		if v.Known == "" {
			out = append(out, v)
		}
	}
	return out
}

func (res *result) excuse(check, why string) { res.Excused[check+": "+why]++ }

// checkOptions are the bounds the checks allow.
type checkOptions struct {
	nearBound  time.Duration // how long a process's near cache may serve a value another process changed
	linTimeout time.Duration // Porcupine's budget per key
	skip       []string      // validators left out (proof that the others catch what they should not)
	cap        int           // the workers' cap on exp's concurrent loads (Options.Backends); 0: none
}

// check runs every validator on h.
func check(h *history, o checkOptions) *result {
	res := &result{Checked: map[string]int{}, Excused: map[string]int{}}
	validators := []struct {
		name string
		fn   func(*history, checkOptions, *result)
	}{
		{"linearizable", checkLinearizable},
		{"read-your-writes", checkReadYourWrites},
		{"one-load", checkOneLoad},
		{"remote-failure", checkRemoteFailure},
		{"values", checkValues},
		{"fencing", checkFencing},
		{"run-once", checkRunOnce},
		{"lock-lost", checkLockLost},
		{"purge", checkPurge},
		{"soft-purge", checkSoftPurge},
		{"soft-invalidate", checkSoftInvalidate},
		{"invalidate", checkInvalidate},
		{"cap", checkCap},
		{"leaks", checkLeaks},
	}
	for _, v := range validators {
		skip := false
		for _, s := range o.skip {
			skip = skip || s == v.name
		}
		if !skip {
			v.fn(h, o, res)
		}
	}
	return res
}

// losesClaim says whether point is one where a pause can outlast a claim or lock
// that nothing keeps alive then: after it is taken and before the loader
// (and its keep-alive) starts, after the loader returned and before the
// write, before a keep-alive's refresh. A process stalled there (a GC
// pause, a stopped VM) loses its claim after LockTTL, the window the
// docs name for a holder that stops ("a claim whose owner died expires
// after LockTTL and is taken over"). A pause elsewhere stops one
// goroutine while its claim is kept alive or already replaced, which the
// promises cover: it excuses nothing.
func losesClaim(point string) bool {
	switch point {
	case failpoint.CacheClaimed, failpoint.CacheLoaded, failpoint.CacheRefreshClaimed, failpoint.CacheRefreshLoaded,
		failpoint.LockObtained, failpoint.LockRefresh:
		return true
	}
	return false
}

// faulted says whether any fault of the processes given (the server's
// faults count for all) overlaps [from, to], or a failpoint pause that can
// lose a claim (losesClaim).
func (h *history) faulted(from, to int64, procs ...string) bool {
	for _, list := range [][]*Record{h.faults, h.failpoints} {
		for _, f := range list {
			if f.Kind == kFailpoint && !losesClaim(f.Name) {
				continue
			}
			end := f.Return
			if end == 0 {
				end = math.MaxInt64
			}
			if f.Call > to || end < from {
				continue
			}
			if f.Proc == "coord" {
				return true
			}
			for _, p := range procs {
				if f.Proc == p {
					return true
				}
			}
		}
	}
	return false
}

// writes returns the successful Sets and Deletes of every key of ns,
// sorted by return, with the running maximum of their calls.
type writeIndex struct {
	byReturn []*Record
	maxCall  []int64 // maxCall[i]: the latest call among byReturn[:i+1]
	argMax   []*Record
}

func indexWrites(ws []*Record) writeIndex {
	sort.Slice(ws, func(i, j int) bool { return ws[i].Return < ws[j].Return })
	ix := writeIndex{byReturn: ws, maxCall: make([]int64, len(ws)), argMax: make([]*Record, len(ws))}
	var best *Record
	for i, w := range ws {
		if best == nil || w.Call > best.Call {
			best = w
		}
		ix.maxCall[i], ix.argMax[i] = best.Call, best
	}
	return ix
}

// latestBefore returns, of the writes that returned before t, the one
// called last.
func (ix writeIndex) latestBefore(t int64) *Record {
	i := sort.Search(len(ix.byReturn), func(i int) bool { return ix.byReturn[i].Return >= t })
	if i == 0 {
		return nil
	}
	return ix.argMax[i-1]
}

// checkReadYourWrites: once a Set or Delete of a key has returned, no read
// that starts afterwards returns a value whose making began before that
// write was called (a Set's value, or a load's: a stale set, a late
// announcement, a joined flight) — at once in the writer's process and
// without near caches, within the near cache's bound in the others.
// Reads made while failing open are excused (counted), and so are
// writes acknowledged during a takeover of their shard (which may lose
// them).
func checkReadYourWrites(h *history, o checkOptions, res *result) {
	const name = "read-your-writes"
	writes := map[string][]*Record{} // ns/key
	for _, r := range h.ops {
		if (r.Kind == kSet || r.Kind == kDelete) && r.Return != 0 && r.Err == "" {
			writes[r.NS+"/"+r.Key] = append(writes[r.NS+"/"+r.Key], r)
		}
	}
	ix := map[string]writeIndex{}
	for k, ws := range writes {
		ix[k] = indexWrites(ws)
	}
	for _, r := range h.ops {
		reads(r, func(key, v string) {
			or, ok := h.originOf(v)
			if !ok {
				return
			}
			res.Checked[name]++
			wix := ix[r.NS+"/"+key]
			w := wix.latestBefore(r.Call)
			if w == nil || w.Call <= or.from || (or.set != nil && w == or.set) {
				return
			}
			// w was called after v's making began and returned before r
			// was called. Allow the near cache's bound across processes.
			if r.Near && w.Proc != r.Proc {
				if w2 := wix.latestBefore(r.Call - int64(o.nearBound)); w2 == nil || w2.Call <= or.from {
					res.excuse(name, "within the near cache's bound")
					return
				}
			}
			if failingOpen(r) || (or.load != nil && h.failOpen(or.load)) {
				res.excuse(name, "read while failing open")
				return
			}
			if h.takeoverOf(w.Kind, w.NS, w.Key, w.Call, w.Return) != nil {
				res.excuse(name, "a write a TAKEOVER failover of its shard may have lost")
				return
			}
			src := or.set
			if src == nil {
				src = or.load
			}
			res.violate(name, fmt.Sprintf("%s of %s/%s returned %s, made before a %s that returned %s before the read began",
				r.Kind, r.NS, key, v, w.Kind, time.Duration(r.Call-w.Return)), r, w, src)
		})
	}
}

// checkOneLoad: one loader run per key at a time across the fleet (and in
// a process), and no second run while the first's value is fresh and
// nobody wrote the key. Runs that overlap a fault or a failpoint pause of
// either process, or the server's, are excused and counted (a claim can be
// lost then: the docs name the window), and so are fail-open runs, and
// runs an invalidation of the value's tags separates (a new generation).
func checkOneLoad(h *history, o checkOptions, res *result) {
	const name = "one-load"
	type run struct {
		l   *Record
		key string
	}
	byKey := map[string][]run{}
	opByID := map[string]*Record{}
	for _, r := range h.ops {
		opByID[fmt.Sprint(r.Proc, "/", r.ID)] = r
	}
	failOpen := func(l *Record, key string) bool {
		op := opByID[fmt.Sprint(l.Proc, "/", l.Op)]
		return op == nil || flagged(op, key, "failopen")
	}
	// A background refresh's loader gets the context of the call that
	// found the value stale.
	refresh := func(l *Record, key string) bool {
		op := opByID[fmt.Sprint(l.Proc, "/", l.Op)]
		return op != nil && flagged(op, key, "stale") && !flagged(op, key, "failopen")
	}
	for _, l := range h.loads {
		for _, k := range l.Keys {
			byKey[l.NS+"/"+k] = append(byKey[l.NS+"/"+k], run{l, k})
		}
	}
	wroteBetween := h.wroteBetween
	// An invalidation of a value's tags acts as a Delete of it: a hard
	// one during two runs ends the first's generation (a reader finds its
	// value invalidated, deletes it and claims the key anew, beside a
	// refresh still running), and either kind after the first run's
	// claim makes its value one to load again (invalidated, or stale and
	// refreshed). The tags that count are those of any value of the key
	// that can be stored then: the key's own, and a batch's mates' (see
	// expTags) for each load of the key that began at most a value's life
	// before. A load in a process with a near cache may have read its
	// tags' records from it, up to the near bound old: its value is then
	// invalidated at once by an invalidation from that long before.
	invalidated := func(nsKey string, runs []run, a, b run, aClaim, bClaim int64, overlap bool) bool {
		_, key, _ := strings.Cut(nsKey, "/")
		tags := expTags(key)
		if len(tags) == 0 {
			return false
		}
		from := func(claim int64, l *Record) int64 {
			if h.near[l.Proc] {
				return claim - int64(o.nearBound)
			}
			return claim
		}
		first, last := min(aClaim, bClaim)-int64(valueLife), max(a.l.Call, b.l.Call)
		for _, r := range runs {
			if r.l.Call >= first && r.l.Call <= last {
				for _, t := range h.loadTags(r.l) {
					if !slices.Contains(tags, t) {
						tags = append(tags, t)
					}
				}
			}
		}
		if overlap {
			return h.invalidatedBetween(tags, from(aClaim, a.l), b.l.Call, false) ||
				h.invalidatedBetween(tags, from(bClaim, b.l), a.l.Call, false)
		}
		return h.invalidatedBetween(tags, from(aClaim, a.l), b.l.Call, true)
	}
	for nsKey, runs := range byKey {
		ns, _, _ := strings.Cut(nsKey, "/")
		fresh := int64(math.MaxInt64)
		if ns == "exp" {
			fresh = int64(expTTL)
		}
		for i, a := range runs {
			res.Checked[name]++
			if a.l.Return == 0 {
				// Its process died during the load: its claim stays until
				// LockTTL, after which the next reader claims the key.
				res.excuse(name, "a run whose process died")
				continue
			}
			aEnd := a.l.Return
			for _, b := range runs[i+1:] {
				if b.l == a.l {
					continue
				}
				// a's claim was taken after its operation began.
				aClaim := a.l.Call
				if op := opByID[fmt.Sprint(a.l.Proc, "/", a.l.Op)]; op != nil {
					aClaim = op.Call
				}
				// b's claim was taken after its operation began.
				bClaim := b.l.Call
				if op := opByID[fmt.Sprint(b.l.Proc, "/", b.l.Op)]; op != nil {
					bClaim = op.Call
				}
				overlap := b.l.Call < aEnd
				// A second run while a's value was fresh and nobody wrote.
				again := !overlap && a.l.Err == "" && a.l.Values[a.key] != "" && b.l.Call-aEnd < fresh &&
					!wroteBetween(nsKey, aClaim, b.l.Call)
				if !overlap && !again {
					if b.l.Call-aEnd > int64(10*time.Second) {
						break
					}
					continue
				}
				sameProc := a.l.Proc == b.l.Proc
				aOpen, bOpen := failOpen(a.l, a.key), failOpen(b.l, b.key)
				switch {
				case overlap && (wroteBetween(nsKey, aClaim, b.l.Call) || wroteBetween(nsKey, bClaim, a.l.Call)):
					// Either run's claim (or fail-open run) may be the
					// first: b's operation can begin before a's even
					// though a's loader starts first.
					res.excuse(name, "a Set or Delete ended the first run's claim, or made a fail-open load start anew")
				case invalidated(nsKey, runs, a, b, aClaim, bClaim, overlap):
					res.excuse(name, "an invalidation of the value's tags began a new generation")
				case overlap && sameProc && (aOpen && bOpen || aOpen && refresh(b.l, b.key) || bOpen && refresh(a.l, a.key)):
					// "loaders run (still once per key per process)": a
					// fail-open load joins the run in progress, and no
					// refresh starts beside a fail-open load.
					res.violate(name, fmt.Sprintf("two loader runs of %s at once in %s, one of them failing open", nsKey, a.l.Proc), a.l, b.l)
				case aOpen || bOpen:
					res.excuse(name, "a fail-open run")
				case h.faulted(a.l.Call-int64(lockTTL), max(aEnd, b.l.Call), a.l.Proc, b.l.Proc):
					res.excuse(name, "a fault or failpoint pause meanwhile")
				case overlap:
					res.violate(name, fmt.Sprintf("two loader runs of %s at once", nsKey), a.l, b.l)
				case wroteBetween(nsKey, bClaim, a.l.Call):
					// b's claim, taken before a's run, was ended by a Set or
					// Delete, and its loader began only after a's run: a
					// batch's load that waited for a backend permit (a
					// single key's checks its claim after the wait; see
					// docs/backends.md). Its write is skipped.
					res.excuse(name, "a Set or Delete ended the second run's claim before its loader ran")
				default:
					res.violate(name, fmt.Sprintf("%s loaded again %s after a run whose value was fresh, nobody having written it",
						nsKey, time.Duration(b.l.Call-aEnd)), a.l, b.l)
				}
			}
		}
	}
}

// wroteBetween says whether a Set, Delete or garbage write of nsKey
// ("ns/key") overlaps [from, to].
func (h *history) wroteBetween(nsKey string, from, to int64) bool {
	if h.writes == nil {
		h.writes = map[string][]*Record{}
		for _, r := range h.ops {
			if r.Kind == kSet || r.Kind == kDelete || r.Kind == kGarbage {
				h.writes[r.NS+"/"+r.Key] = append(h.writes[r.NS+"/"+r.Key], r)
			}
		}
	}
	for _, w := range h.writes[nsKey] {
		end := w.Return
		if end == 0 {
			end = math.MaxInt64
		}
		if w.Call < to && end > from {
			return true
		}
	}
	return false
}

// checkRemoteFailure: a caller that waited for another process's rebuild
// that failed gets cache.ErrRemoteLoad (never the loader's error as its
// own) and runs no loader of its own for it.
func checkRemoteFailure(h *history, o checkOptions, res *result) {
	const name = "remote-failure"
	failed := map[string]*Record{} // failure ID ("F.proc.id" or "P.proc.id") -> load
	byKey := map[string][]*Record{}
	for _, l := range h.loads {
		if l.Err == "" || l.Return == 0 {
			continue
		}
		if id, ok := failureID(l.Err); ok {
			failed[id] = l
			for _, k := range l.Keys {
				byKey[l.NS+"/"+k] = append(byKey[l.NS+"/"+k], l)
			}
		}
	}
	// Remote failures are reported as such.
	for _, r := range h.ops {
		if r.Err == "" || (r.Kind != kGetOrLoad && r.Kind != kGetMany) {
			continue
		}
		for _, id := range failureIDs(r.Err) {
			l := failed[id]
			if l == nil || l.Proc == r.Proc {
				continue
			}
			res.Checked[name]++
			if r.Kind == kGetOrLoad && r.ErrKind != "remote" {
				res.violate(name, fmt.Sprintf("another process's loader failure reached %s as %q, not cache.ErrRemoteLoad", r.Proc, r.ErrKind), r, l)
			}
			if r.Kind == kGetMany && strings.Contains(r.Detail, "=other;") && !strings.Contains(r.Detail, "=remote;") {
				res.violate(name, "another process's loader failure reached a batch not as cache.ErrRemoteLoad", r, l)
			}
		}
	}
	// A waiter whose rebuild failed while it waited runs no loader for it.
	opByID := map[string]*Record{}
	for _, r := range h.ops {
		opByID[fmt.Sprint(r.Proc, "/", r.ID)] = r
	}
	for _, b := range h.loads {
		op := opByID[fmt.Sprint(b.Proc, "/", b.Op)]
		if op == nil {
			continue
		}
		for _, k := range b.Keys {
			if !flagged(op, k, "wait") {
				continue
			}
			res.Checked[name]++
			for _, a := range byKey[b.NS+"/"+k] {
				if a.Proc == b.Proc || a.Return < op.Call || a.Return > b.Call {
					continue
				}
				if h.wroteBetween(b.NS+"/"+k, op.Call, b.Call) {
					// The write removed the claim: waiters read the key
					// again, and one of them claims it.
					res.excuse(name, "a Set or Delete ended the failed rebuild's claim")
					continue
				}
				if h.faulted(op.Call-int64(lockTTL), b.Call, a.Proc, b.Proc) {
					res.excuse(name, "a fault or failpoint pause meanwhile")
					continue
				}
				// The window the failure marker closed (docs/cache.md's
				// table: a failure announced before the waiter's
				// subscription was confirmed) is named in the message, for
				// whoever reads the report: it fails the run like any
				// other. A batch waits for each of its keys on a
				// subscription of its own (on a Cluster, on the key's
				// shard), and its traces do not say which key each was:
				// any confirmed after the announcement and before the
				// waiter's load can be this key's.
				late := ""
				if announced := h.traceAt(a, failpoint.CacheAnnounced); announced != 0 && h.tracedIn(op, failpoint.CacheSubscribed, announced, b.Call) {
					late = " (the failure was announced before the waiter's subscription was confirmed: the failure marker's window)"
				}
				res.violate(name, fmt.Sprintf("%s waited for %s/%s, whose rebuild in %s failed while it waited, and then ran its own loader%s",
					op.Proc, b.NS, k, a.Proc, late), op, a, b)
			}
		}
	}
}

// traceAt returns when the operation r (or, for a load, the operation
// whose context it got) first reached the traced failpoint name, or 0.
func (h *history) traceAt(r *Record, name string) int64 {
	ts := h.tracesOf(r, name)
	if len(ts) == 0 {
		return 0
	}
	return ts[0]
}

// tracedIn says whether the operation r (or, for a load, the operation
// whose context it got) reached the traced failpoint name within
// (after, until].
func (h *history) tracedIn(r *Record, name string, after, until int64) bool {
	for _, t := range h.tracesOf(r, name) {
		if t > after && t <= until {
			return true
		}
	}
	return false
}

// tracesOf returns every time the operation r (or, for a load, the
// operation whose context it got) reached the traced failpoint name, in
// order.
func (h *history) tracesOf(r *Record, name string) []int64 {
	proc, id := r.Proc, r.ID
	if r.Kind == kLoad {
		id = r.Op
	}
	if h.traces == nil {
		h.traces = map[string][]int64{}
		for _, f := range h.failpoints { // in call order
			if f.Detail != "trace" {
				continue
			}
			k := fmt.Sprint(f.Proc, "/", f.Op, "/", f.Name)
			h.traces[k] = append(h.traces[k], f.Call)
		}
	}
	return h.traces[fmt.Sprint(proc, "/", id, "/", name)]
}

// failureID finds the first failure ID in an error text.
func failureID(s string) (string, bool) {
	ids := failureIDs(s)
	if len(ids) == 0 {
		return "", false
	}
	return ids[0], true
}

// failureIDs finds every "F.proc.n" or "P.proc.n" in s.
func failureIDs(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ' ' || r == ':' || r == ';' || r == '"' || r == '(' || r == ')' }) {
		if (strings.HasPrefix(f, "F.") || strings.HasPrefix(f, "P.")) && strings.Count(f, ".") == 2 {
			out = append(out, f)
		}
	}
	return out
}

// checkValues: every value read is for the key read, intact, from a write
// that happened; every HTTP answer is for the page asked for.
func checkValues(h *history, o checkOptions, res *result) {
	const name = "values"
	for _, r := range h.ops {
		if strings.Contains(r.Err, "padding damaged") {
			res.violate(name, "a value came back damaged", r)
		}
		if r.Kind == kHTTP && strings.HasPrefix(r.Detail, "wrong body") {
			res.violate(name, "an HTTP answer for another page", r)
		}
		if r.Kind == kGetMany {
			asked := map[string]bool{}
			for _, k := range r.Keys {
				asked[k] = true
			}
			for k := range r.Values {
				if !asked[k] {
					res.violate(name, "a batch returned a key it was not asked for: "+k, r)
				}
			}
		}
		reads(r, func(key, v string) {
			res.Checked[name]++
			or, ok := h.originOf(v)
			switch {
			case !ok:
				res.violate(name, fmt.Sprintf("%s of %s/%s returned %s, which no Set or loader made", r.Kind, r.NS, key, v), r)
			case or.key != key:
				res.violate(name, fmt.Sprintf("%s of %s/%s returned %s, made for %s", r.Kind, r.NS, key, v, or.key), r)
			case or.start > r.Return:
				res.violate(name, fmt.Sprintf("%s of %s/%s returned %s, made after it returned", r.Kind, r.NS, key, v), r)
			}
		})
	}
}

// checkFencing: every fenced write a holder saw accepted is in the store's
// log, the log's fences never go down, and each counter equals its log's
// length.
func checkFencing(h *history, o checkOptions, res *result) {
	const name = "fencing"
	logged := map[string]bool{}
	for n, log := range h.store {
		var last int64
		for i, e := range log {
			res.Checked[name]++
			var fence, id int64
			var proc string
			if _, err := fmt.Sscanf(e, "%d %s %d", &fence, &proc, &id); err != nil {
				res.violate(name, fmt.Sprintf("counter %d: log entry %q unreadable", n, e))
				continue
			}
			logged[fmt.Sprint(n, " ", proc, " ", id)] = true
			if fence < last {
				res.violate(name, fmt.Sprintf("counter %d: the store accepted fence %d (%s, op %d) after fence %d, at log entry %d", n, fence, proc, id, last, i))
			}
			last = max(last, fence)
		}
		if n < len(h.counters) && h.counters[n] != int64(len(log)) {
			res.violate(name, fmt.Sprintf("counter %d is %d, but %d writes were accepted", n, h.counters[n], len(log)))
		}
	}
	for _, r := range h.ops {
		if r.Kind == kLock && r.Value == "accepted" && !logged[fmt.Sprint(r.Key, " ", r.Proc, " ", r.ID)] {
			res.violate(name, "an acknowledged fenced write is not in the store", r)
		}
	}
}

// checkLockLost: a lock is lost when the server says so or when no
// refresh could have reached it in time, not earlier: a Do that ended
// with ErrLost while the server still held the lock for more than half
// its TTL, with no fault meanwhile, lost it to its own keep-alive.
func checkLockLost(h *history, o checkOptions, res *result) {
	const name = "lock-lost"
	for _, r := range h.ops {
		if r.Kind != kLock || !strings.HasPrefix(r.Detail, "lost:") {
			continue
		}
		res.Checked[name]++
		var held bool
		var pttl int64
		if _, err := fmt.Sscanf(r.Detail, "lost: held=%t pttl=%d", &held, &pttl); err != nil || !held || pttl < int64(lockHold/2/time.Millisecond) {
			continue
		}
		if h.faulted(r.Call, r.Return, r.Proc) {
			res.excuse(name, "a fault or a paused refresh meanwhile")
			continue
		}
		res.violate(name, fmt.Sprintf("lock %s declared lost while the server held it for %d ms more", r.Key, pttl), r)
	}
}

// checkRunOnce: a scheduled slot runs on one process at most while its
// lock is held: two runs of a slot are a violation when neither can have
// obtained the lock after the other's MinHold ended (a process can call
// late, stalled, and a paused server can take an obtain late), unless a
// takeover of the lock's shard can have lost it (excused, counted).
func checkRunOnce(h *history, o checkOptions, res *result) {
	const name = "run-once"
	ran := map[string][]*Record{}
	for _, r := range h.ops {
		if r.Kind == kRunOnce {
			res.Checked[name]++
			if r.Value == "ran" {
				ran[r.Key] = append(ran[r.Key], r)
			}
		}
	}
	// The lock lives from its obtain, within its operation, until at
	// least runOnceMinHold after the operation began.
	held := func(a, b *Record) bool { // b obtained it while a held it, whichever came first
		return a.Return != 0 && b.Return != 0 && b.Return < a.Call+int64(runOnceMinHold) && a.Return < b.Call+int64(runOnceMinHold)
	}
	for slot, rs := range ran {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Call < rs[j].Call })
		for i, a := range rs {
			for _, b := range rs[i+1:] {
				switch {
				case !held(a, b):
					res.excuse(name, "a run that may have obtained the lock after the other's MinHold")
				case h.takeoverOf(a.Kind, a.NS, a.Key, a.Call, a.Return) != nil || h.takeoverOf(b.Kind, b.NS, b.Key, b.Call, b.Return) != nil:
					res.excuse(name, "a lock a TAKEOVER failover of its shard may have lost")
				default:
					res.violate(name, fmt.Sprintf("slot %s ran twice within its MinHold", slot), a, b)
				}
			}
		}
	}
}

// checkPurge: once PurgeURL, PurgeTag or a POST to a page has returned, no
// request that starts afterwards is answered with a render that began
// before the purge was called — at once without near caches and in the
// purging process, within the near cache's bound in the others. A purge
// made during a takeover of its record's shard may be lost (excused,
// counted).
func checkPurge(h *history, o checkOptions, res *result) {
	purges := func(r *Record, n int) bool {
		switch {
		case r.Kind == kPurgeURL && r.Key == fmt.Sprintf("/p/%d", n),
			r.Kind == kPost && r.Key == fmt.Sprintf("/p/%d", n) && r.Status == 200 && !failingOpen(r):
			// A POST whose invalidation may have failed (a server
			// error on its way) is answered all the same: the
			// middleware logs it, and the page expires as it would
			// have (docs/http.md). It purges nothing the check counts on.
			return true
		case r.Kind == kPurgeTag:
			return slices.Contains(pageTags(n), r.Key)
		}
		return false
	}
	checkPagePurges(h, o, res, "purge", purges, nil)
}

// checkPagePurges checks the GETs answered with a render begun before a
// purge of their page (purges says whether r, an operation that returned
// without error, purges page n) that returned before they started: each
// is a violation unless allowed(r) (nil: none is) or a window excuses it
// (counted as the check name). Every GET answered with a render counts
// as checked when allowed is nil, otherwise only those after a purge.
func checkPagePurges(h *history, o checkOptions, res *result, name string, purges func(r *Record, n int) bool, allowed func(r *Record) bool) {
	byPage := map[int][]*Record{}
	for _, r := range h.ops {
		if r.Return == 0 || r.Err != "" {
			continue
		}
		for n := range httpPages {
			if purges(r, n) {
				byPage[n] = append(byPage[n], r)
			}
		}
	}
	ix := map[int]writeIndex{}
	for n, ps := range byPage {
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
		if allowed == nil {
			res.Checked[name]++
		}
		pix := ix[n]
		p := pix.latestBefore(r.Call)
		if p == nil || p.Call <= start {
			continue
		}
		if allowed != nil {
			res.Checked[name]++
			if allowed(r) {
				continue
			}
		}
		if failingOpen(r) {
			// Its process could not reach the server (it rendered
			// without it, or shared a render of its own process that
			// did): it cannot learn of a purge made elsewhere until it
			// reaches the server again, as docs/http.md says.
			res.excuse(name, "answered while its process failed open")
			continue
		}
		if r.Near && p.Proc != r.Proc {
			if p2 := pix.latestBefore(r.Call - int64(o.nearBound)); p2 == nil || p2.Call <= start {
				res.excuse(name, "within the near cache's bound")
				continue
			}
		}
		if h.takeoverOf(p.Kind, p.NS, p.Key, p.Call, p.Return) != nil {
			res.excuse(name, "a purge a TAKEOVER failover of its shard may have lost")
			continue
		}
		res.violate(name, fmt.Sprintf("GET %s answered (X-Cache %s) with a render begun %s before a %s %s that returned %s before the request",
			r.Key, r.Cache, time.Duration(p.Call-start), p.Kind, p.Key, time.Duration(r.Call-p.Return)), r, p)
	}
}

// checkLeaks: every process that ran to its end closed everything: no
// goroutine more than it began with, no connection left.
func checkLeaks(h *history, o checkOptions, res *result) {
	const name = "leaks"
	for _, p := range h.procs {
		if p == "coord" {
			continue
		}
		e := h.ends[p]
		if e == nil {
			continue // crashed on purpose: the coordinator checks exit statuses
		}
		res.Checked[name]++
		if e.Counts["goroutinesAfter"] > e.Counts["goroutinesBefore"] {
			res.violate(name, fmt.Sprintf("%s: %d goroutines after closing, %d before opening", p,
				e.Counts["goroutinesAfter"], e.Counts["goroutinesBefore"]), e)
		}
		if e.Counts["connsAfter"] > 0 {
			res.violate(name, fmt.Sprintf("%s: %d connections open after closing", p, e.Counts["connsAfter"]), e)
		}
	}
}

// failingOpen says whether operation r may have been served without the
// server, where the docs promise nothing about other processes' writes:
// a key of it ran the loader without the server, one of its server calls
// failed, or it skipped the server, the cache being in its fail-open
// cooldown (failpoint.CacheDown).
func failingOpen(r *Record) bool {
	for k := range r.Flags {
		if flagged(r, k, "failopen") {
			return true
		}
	}
	return flagged(r, "*", "servererror") || flagged(r, "*", failpoint.CacheDown)
}
