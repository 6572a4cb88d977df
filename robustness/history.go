// This file reads a run's history back: every worker's file, the start
// and end lines of an operation merged, and indexes the checker needs
// (operations by key, the origin of every value).

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// history is a whole run.
type history struct {
	ops           []*Record // operations (not loads, faults, failpoints or ends), in call order
	loads         []*Record
	faults        []*Record // the workers' proxies' and the server's
	failpoints    []*Record
	ends          map[string]*Record // by process
	procs         []string
	near          map[string]bool // processes whose exp and http caches have the near cache
	loadByID      map[string]*Record
	opByID        map[string]*Record   // by "proc/id"
	setByValue    map[string]*Record   // a Set's value -> the Set
	last          int64                // the latest time in the history
	store         []storeLog           // the fenced store's logs, read at the end
	counters      []int64              // the fenced counters, read at the end
	writes        map[string][]*Record // Sets, Deletes and garbage by "ns/key", built by wroteBetween
	traces        map[string][]int64   // "proc/op/point" -> when reached, in order, built by tracesOf
	prefix        string               // of every key and namespace (the coordinator sets it)
	takeoverList  *[]takeover          // built by takeovers
	invalidations map[string][]*Record // successful InvalidateTags and SoftInvalidateTags, by kind and tag (tagOps)
}

// storeLog is one counter's log: "fence proc id" per accepted write.
type storeLog []string

func readHistory(dir string) (*history, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		return nil, err
	}
	h := &history{ends: map[string]*Record{}, near: map[string]bool{}, loadByID: map[string]*Record{}, opByID: map[string]*Record{}, setByValue: map[string]*Record{}}
	seen := map[string]bool{}
	for _, f := range files {
		if err := h.readFile(f, seen); err != nil {
			return nil, err
		}
	}
	sort.Strings(h.procs)
	for _, list := range [][]*Record{h.ops, h.loads, h.faults, h.failpoints} {
		sort.SliceStable(list, func(i, j int) bool { return list[i].Call < list[j].Call })
	}
	return h, nil
}

func (h *history) readFile(path string, seen map[string]bool) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	byID := map[string]*Record{}
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var r Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			// A process killed mid-write leaves a partial last line.
			continue
		}
		id := r.Proc + "/" + strconv.FormatInt(r.ID, 10)
		if _, ok := byID[id]; !ok {
			order = append(order, id)
		}
		rr := r
		byID[id] = &rr
		if !seen[r.Proc] && r.Proc != "" {
			seen[r.Proc] = true
			h.procs = append(h.procs, r.Proc)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, id := range order {
		r := byID[id]
		h.last = max(h.last, r.Call, r.Return)
		if r.Near {
			h.near[r.Proc] = true
		}
		switch r.Kind {
		case kLoad:
			h.loads = append(h.loads, r)
			h.loadByID[id] = r
		case kFault:
			h.faults = append(h.faults, r)
		case kFailpoint:
			h.failpoints = append(h.failpoints, r)
		case kEnd:
			h.ends[r.Proc] = r
		default:
			h.ops = append(h.ops, r)
			h.opByID[id] = r
			if r.Kind == kSet {
				h.setByValue[r.Value] = r
			}
		}
	}
	return nil
}

// origin is where a value came from: the Set that wrote it or the load
// that made it, and the key it was made for.
type origin struct {
	set, load *Record
	key       string
	start     int64 // when its making began
	// from is the moment after which a write makes it "from before"
	// that write: a Set's return (a Set still running may take effect
	// after a later one; never, if its outcome is unknown), a load's
	// call (its claim was taken before, and a write after it ends the
	// claim).
	from int64
}

// originOf names the origin of a value read ("S.proc.id" or
// "L.proc.n", n being the load's ID times 100 plus the key's index).
func (h *history) originOf(v string) (origin, bool) {
	kind, rest, ok := strings.Cut(v, ".")
	if !ok {
		return origin{}, false
	}
	switch kind {
	case "S":
		s := h.setByValue[v]
		if s == nil {
			return origin{}, false
		}
		from := s.Return
		if from == 0 {
			from = math.MaxInt64
		}
		return origin{set: s, key: s.Key, start: s.Call, from: from}, true
	case "L":
		i := strings.LastIndexByte(rest, '.')
		if i < 0 {
			return origin{}, false
		}
		n, err := strconv.ParseInt(rest[i+1:], 10, 64)
		if err != nil {
			return origin{}, false
		}
		l := h.loadByID[rest[:i]+"/"+strconv.FormatInt(n/100, 10)]
		if l == nil || int(n%100) >= len(l.Keys) {
			return origin{}, false
		}
		return origin{load: l, key: l.Keys[n%100], start: l.Call, from: l.Call}, true
	}
	return origin{}, false
}

// flagged says whether the operation's Observer flags for key include f.
func flagged(r *Record, key, f string) bool {
	for _, x := range r.Flags[key] {
		if x == f {
			return true
		}
	}
	return false
}

// reads yields every value an operation read, per key: a Get's (stale
// or not), a GetOrLoad's, each key of a GetOrLoadMany. Misses are not
// yielded.
func reads(r *Record, yield func(key, v string)) {
	switch r.Kind {
	case kGet, kGetOrLoad:
		if (r.Err == "" || r.Kind == kGet && r.ErrKind == "stale") && r.Return != 0 && r.Value != "" {
			yield(r.Key, r.Value)
		}
	case kGetMany:
		if r.Return == 0 {
			return
		}
		for k, v := range r.Values {
			yield(k, v)
		}
	}
}

// describe is one line about a record, for reports.
func describe(r *Record) string {
	b, _ := json.Marshal(r)
	return string(b)
}

// failOpen says whether load l ran without the server (its operation's
// Observer said so), or its operation is unknown.
func (h *history) failOpen(l *Record) bool {
	op := h.opByID[l.Proc+"/"+strconv.FormatInt(l.Op, 10)]
	if op == nil {
		return true
	}
	for _, k := range l.Keys {
		if flagged(op, k, "failopen") {
			return true
		}
	}
	return false
}
