// This file holds the worker's use of the library's failpoints
// (internal/failpoint): at the steps of the claim protocol and of a
// render, it now and then pauses the step (past a lock's TTL, sometimes)
// or, with the crash mix, ends the process there.

package main

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/hotkv/stampede/internal/failpoint"
)

// traced says whether every firing of point is recorded with its time,
// for the checker to order an announcement and a subscription.
func traced(point string) bool {
	return point == failpoint.CacheAnnounced || point == failpoint.CacheSubscribed
}

// crashCutoff is how long before the end of traffic a worker stops
// crashing: the processes that end the run end it cleanly, so that the
// leak check has processes to look at (a replacement is started only
// while more than 2 s remain).
const crashCutoff = 4 * time.Second

func (w *worker) enableFailpoints() (disable func()) {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(w.cfg.Seed, 0xfa11))
	return failpoint.Enable(func(ctx context.Context, name string) {
		// Every point an operation reaches is on its record, under "*":
		// the trace of what the library did for it.
		if info := infoOf(ctx); info != nil {
			info.flag("*", name)
			if traced(name) {
				w.rec.write(Record{Kind: kFailpoint, ID: w.rec.nextID(), Op: info.id, Name: name, Detail: "trace", Call: now(), Return: now()})
			}
		}
		mu.Lock()
		p := r.IntN(1000)
		d := time.Duration(r.IntN(int(lockTTL/time.Millisecond)*2)) * time.Millisecond
		mu.Unlock()
		switch {
		case w.cfg.Mix.Crash && p < 2 && time.Until(time.Unix(0, w.cfg.Until)) > crashCutoff:
			rec := Record{Kind: kFailpoint, ID: w.rec.nextID(), Name: name, Detail: "crash", Call: now()}
			if info := infoOf(ctx); info != nil {
				rec.Op = info.id
			}
			w.rec.write(rec)
			w.rec.crash(crashExit)
		case w.cfg.Mix.Failpoints && p < 30:
			rec := Record{Kind: kFailpoint, ID: w.rec.nextID(), Name: name, Detail: "pause", Call: now()}
			if info := infoOf(ctx); info != nil {
				rec.Op = info.id
			}
			time.Sleep(d) // the pause is the point: a process stopped between two steps
			rec.Return = now()
			w.rec.write(rec)
		}
	})
}
