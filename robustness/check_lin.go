// This file holds the linearizability check of namespace lin with
// Porcupine: per key, a register whose writes are Set, Delete and the
// store of each loaded value (which happens only where nothing is stored,
// and may not happen: a Set or Delete during the load wins), and whose
// reads are Get and the GetOrLoad results that did not come from the
// reading process's own load.

package main

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

type linInput struct {
	op    string // "set", "delete", "store", "read"
	value string // written or read; "" is nothing stored
	sure  bool   // a write known to have happened (it returned without error)
}

// linFailure is a key whose history is not linearizable, with what
// Porcupine found, for the report.
type linFailure struct {
	key    string
	result porcupine.CheckResult
	info   porcupine.LinearizationInfo
}

var linModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{""} },
	Step: func(state, input, output any) []any {
		st, in := state.(string), input.(linInput)
		switch in.op {
		case "read":
			if in.value == st {
				return []any{st}
			}
			return nil
		case "store":
			if st == "" {
				return []any{"", in.value}
			}
			return []any{st}
		case "delete":
			if in.sure {
				return []any{""}
			}
			return []any{st, ""}
		default: // set
			if in.sure {
				return []any{in.value}
			}
			return []any{st, in.value}
		}
	},
	Equal: func(a, b any) bool { return a.(string) == b.(string) },
	Hash: func(s any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(s.(string)))
		return h.Sum64()
	},
	DescribeOperation: func(input, output any) string {
		in := input.(linInput)
		switch in.op {
		case "read":
			if in.value == "" {
				return "read → nothing"
			}
			return "read → " + in.value
		case "delete":
			return map[bool]string{true: "delete", false: "delete (outcome unknown)"}[in.sure]
		}
		return fmt.Sprintf("%s %s%s", in.op, in.value, map[bool]string{true: "", false: " (may not happen)"}[in.sure])
	},
}

func checkLinearizable(h *history, o checkOptions, res *result) {
	const name = "linearizable"
	procID := map[string]int{}
	for i, p := range h.procs {
		procID[p] = i
	}
	inf := h.last + int64(time.Hour)
	opByID := map[string]*Record{}
	for _, r := range h.ops {
		opByID[fmt.Sprint(r.Proc, "/", r.ID)] = r
	}
	// The first successful return, in the loading process, of each loaded
	// value: its store, if it happened, was done by then.
	returned := map[string]int64{}
	for _, r := range h.ops {
		if r.NS != "lin" {
			continue
		}
		reads(r, func(key, v string) {
			k := r.Proc + " " + v
			if t, ok := returned[k]; !ok || r.Return < t {
				returned[k] = r.Return
			}
		})
	}
	byKey := map[string][]porcupine.Operation{}
	observed := map[string]bool{} // the values some read below returned
	add := func(key string, r *Record, in linInput, call, ret int64) {
		if in.op == "read" {
			observed[in.value] = true
		}
		byKey[key] = append(byKey[key], porcupine.Operation{ClientId: procID[r.Proc], Input: in, Call: call, Return: ret, Metadata: r})
	}
	// A write that may not have happened and whose value no read returned
	// is left out: had it happened, another write replaced it before any
	// read (values are unique), so leaving it out changes no read's
	// answer, and spares Porcupine an operation that never returns.
	var maybeSets []*Record
	for _, r := range h.ops {
		if r.NS != "lin" {
			continue
		}
		ret := r.Return
		sure := ret != 0 && r.Err == ""
		if !sure {
			ret = inf
		}
		// During a takeover of the key's shard an acknowledged write may
		// be lost (it becomes one that may not happen, within its
		// interval), and a read may be answered by the old master.
		tookOver := func(key string) bool { return h.takeoverOf(r.Kind, r.NS, key, r.Call, r.Return) != nil }
		switch r.Kind {
		case kSet:
			if !sure {
				maybeSets = append(maybeSets, r)
				break
			}
			if tookOver(r.Key) {
				res.excuse(name, "a write during a TAKEOVER failover of its shard, which may lose it")
				add(r.Key, r, linInput{op: "set", value: r.Value}, r.Call, ret)
				break
			}
			add(r.Key, r, linInput{op: "set", value: r.Value, sure: sure}, r.Call, ret)
		case kDelete:
			if sure && tookOver(r.Key) {
				res.excuse(name, "a write during a TAKEOVER failover of its shard, which may lose it")
				sure = false
			}
			add(r.Key, r, linInput{op: "delete", sure: sure}, r.Call, ret)
		case kGet:
			if (sure || r.ErrKind == "miss") && tookOver(r.Key) {
				res.excuse(name, "a read during a TAKEOVER failover of its shard")
				break
			}
			switch {
			case sure:
				add(r.Key, r, linInput{op: "read", value: r.Value}, r.Call, ret)
			case r.ErrKind == "miss":
				add(r.Key, r, linInput{op: "read"}, r.Call, r.Return)
			}
		case kGetOrLoad, kGetMany:
			reads(r, func(key, v string) {
				res.Checked[name]++
				if or, ok := h.originOf(v); failingOpen(r) || (ok && or.load != nil && h.failOpen(or.load)) {
					res.excuse(name, "read while failing open")
					return
				}
				if tookOver(key) {
					res.excuse(name, "a read during a TAKEOVER failover of its shard")
					return
				}
				if or, ok := h.originOf(v); ok && or.load != nil && or.load.Proc == r.Proc {
					return // its own process's load: its store is an operation of its own
				}
				add(key, r, linInput{op: "read", value: v}, r.Call, r.Return)
			})
		}
	}
	for _, l := range h.loads {
		if l.NS != "lin" || l.Err != "" || l.Return == 0 {
			continue
		}
		if op := opByID[fmt.Sprint(l.Proc, "/", l.Op)]; op != nil && len(l.Keys) > 0 && flagged(op, l.Keys[0], "failopen") {
			continue // not stored
		}
		for k, v := range l.Values {
			if !observed[v] {
				continue // a store that may not have happened, unseen
			}
			ret, ok := returned[l.Proc+" "+v]
			if !ok {
				ret = inf
			}
			add(k, l, linInput{op: "store", value: v}, l.Return, max(ret, l.Return+1))
		}
	}
	for _, r := range maybeSets {
		if observed[r.Value] {
			add(r.Key, r, linInput{op: "set", value: r.Value}, r.Call, inf)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	model := linModel.ToModel()
	for _, k := range keys {
		ops := byKey[k]
		res.Checked[name+" ops"] += len(ops)
		result, info := porcupine.CheckOperationsVerbose(model, ops, o.linTimeout)
		switch result {
		case porcupine.Illegal:
			res.Lin = append(res.Lin, linFailure{key: k, result: result, info: info})
			res.violate(name, fmt.Sprintf("lin/%s: the history of %d operations is not linearizable (see lin-%s.html)", k, len(ops), k))
		case porcupine.Unknown:
			res.excuse(name, "Porcupine ran out of time on a key")
		}
	}
}

// writeLinReports writes Porcupine's visualisation of each key that
// failed.
func writeLinReports(dir string, res *result) []string {
	var out []string
	model := linModel.ToModel()
	for _, f := range res.Lin {
		path := filepath.Join(dir, "lin-"+f.key+".html")
		if err := porcupine.VisualizePath(model, f.info, path); err != nil {
			fmt.Fprintln(os.Stderr, "robustness: visualisation:", err)
			continue
		}
		out = append(out, path)
	}
	return out
}
