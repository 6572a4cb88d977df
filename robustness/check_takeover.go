// This file holds what the checker knows of the takeovers the coordinator
// made on a Cluster (nemesis.Failover in its TAKEOVER mode): which keys
// each one can have lost writes of, and when. The docs name the window:
// a failover to a replica that had not received a write loses it (cache:
// "a failover to a replica that missed the write"; locks: "a failover to
// a replica that had not received the lock yet can admit a second
// holder"). A graceful failover waits for the replica and loses nothing,
// so it excuses nothing here.

package main

import (
	"fmt"
	"math"
	"strings"

	"github.com/hotkv/stampede/internal/redisx"
)

// takeover is one CLUSTER FAILOVER TAKEOVER: a write to its slots
// acknowledged within [from, to] may be lost (the record begins when the
// replica had every write the old master had acknowledged, and ends once
// the old master knows it is a replica), and a read then may be answered
// by either master.
type takeover struct {
	rec      *Record
	from, to int64
	slots    [][2]int
}

// takeovers returns the run's takeovers, parsed from the coordinator's
// failover records ("TAKEOVER: A took over B's slots 0-5460; ...").
func (h *history) takeovers() []takeover {
	if h.takeoverList != nil {
		return *h.takeoverList
	}
	out := []takeover{}
	for _, f := range h.faults {
		if f.Proc != "coord" || f.Name != "failover" || !strings.HasPrefix(f.Detail, "TAKEOVER: ") {
			continue
		}
		_, rest, ok := strings.Cut(f.Detail, " took over ")
		if !ok {
			continue // it did not happen
		}
		_, rest, ok = strings.Cut(rest, " slots ")
		if !ok {
			continue
		}
		ranges, _, _ := strings.Cut(rest, ";")
		t := takeover{rec: f, from: f.Call, to: f.Return}
		if t.to == 0 {
			t.to = math.MaxInt64
		}
		for _, r := range strings.Split(ranges, ",") {
			var lo, hi int
			if n, _ := fmt.Sscanf(r, "%d-%d", &lo, &hi); n == 2 {
				t.slots = append(t.slots, [2]int{lo, hi})
			} else if n == 1 {
				t.slots = append(t.slots, [2]int{lo, lo})
			}
		}
		out = append(out, t)
	}
	h.takeoverList = &out
	return out
}

// takeoverOf returns a takeover of the slot of the key kind/ns/key whose
// window [from, to] overlaps [call, ret] (ret 0: never returned), or nil.
func (h *history) takeoverOf(kind, ns, key string, call, ret int64) *takeover {
	list := h.takeovers()
	if len(list) == 0 {
		return nil
	}
	s, ok := h.slotOf(kind, ns, key)
	if !ok {
		return nil
	}
	if ret == 0 {
		ret = math.MaxInt64
	}
	for i, t := range list {
		if t.from > ret || t.to < call {
			continue
		}
		for _, r := range t.slots {
			if s >= r[0] && s <= r[1] {
				return &list[i]
			}
		}
	}
	return nil
}

// slotOf returns the Cluster slot of the server key an operation writes:
// a cache entry's (NS:{tag}: the tag decides), a tag's record, a RunOnce slot's lock
// (prefix:job:n), and the http namespace's entries a purge writes, named
// as the middleware names them (middleware/tags.go: tagKey, "tag\n" and
// the tag; middleware/key.go: baseKey, "GET http://host/path").
func (h *history) slotOf(kind, ns, key string) (int, bool) {
	switch {
	case kind == kInvalidateTag || kind == kSoftInvalidateTag:
		// A tag's record, NS:{tag T} (cache/tags.go: recordKeys).
		return int(redisx.Slot("tag " + redisx.Tag(key))), true
	case ns == "lin" || ns == "exp":
		return int(redisx.Slot(redisx.Tag(key))), true
	case kind == kRunOnce:
		return int(redisx.Slot(redisx.HashTag(fmt.Sprintf("%s:job:%s", h.prefix, key)))), true
	case kind == kPurgeTag || kind == kSoftPurgeTag:
		return int(redisx.Slot(redisx.Tag("tag\n" + key))), true
	case kind == kPurgeURL || kind == kSoftPurgeURL || kind == kPost:
		return int(redisx.Slot(redisx.Tag("GET http://" + httpHost + key))), true
	}
	return 0, false
}
