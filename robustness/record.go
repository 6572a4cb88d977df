// This file holds what a worker records: one Record per operation, loader
// run, fault or failpoint, written as a line of JSON the moment it is
// known, so that a process that crashes leaves every operation it began
// (those without an end have an unknown outcome).

package main

import (
	"bufio"
	"encoding/json"
	"os"
	"sync"
	"time"
)

// Record kinds.
const (
	kGetOrLoad = "getorload" // cache.GetOrLoad
	kGetMany   = "getmany"   // cache.GetOrLoadMany
	kGet       = "get"       // cache.Get
	kSet       = "set"       // cache.Set
	kDelete    = "delete"    // Cache.Delete
	kGarbage   = "garbage"   // bytes no cache can decode, written under a value key by a plain SET
	kLoad      = "load"      // one loader run (of one key, or of a batch)
	kLock      = "lock"      // a fenced increment under lock.Do or Obtain
	kRunOnce   = "runonce"   // lock.RunOnce of a scheduled slot
	kHTTP      = "http"      // a GET through the middleware
	kPost      = "post"      // a POST through the middleware (invalidates the URL)
	kPurgeURL  = "purgeurl"  // Middleware.PurgeURL
	kPurgeTag  = "purgetag"  // Middleware.PurgeTag
	kFault     = "fault"     // a fault of this worker's proxy, or of the server (the coordinator's)
	kFailpoint = "failpoint" // a failpoint inside the library that fired
	kEnd       = "end"       // the worker's last record: its leak checks

	kInvalidateTag     = "invalidatetag"     // Cache.InvalidateTag of one tag, the Key (namespace exp)
	kSoftInvalidateTag = "softinvalidatetag" // Cache.SoftInvalidateTag of one tag, the Key (namespace exp)

	kSoftPurgeURL = "softpurgeurl" // Middleware.SoftPurgeURL
	kSoftPurgeTag = "softpurgetag" // Middleware.SoftPurgeTag
)

// Record is one line of a history. Call and Return are Unix nanoseconds
// of the machine's clock, which every process shares; Return is 0 when the
// outcome is unknown (the process died first).
type Record struct {
	Kind string `json:"k"`
	Proc string `json:"p"`           // the process: "w2", or "w2.1" for its restart; "coord"
	ID   int64  `json:"id"`          // unique in the process; a start line and an end line share it
	Op   int64  `json:"op,omitzero"` // for a load: the operation whose context the loader got

	NS   string   `json:"ns,omitzero"` // the cache's namespace label: "lin", "exp" or "http"
	Near bool     `json:"near,omitzero"`
	Key  string   `json:"key,omitzero"`
	Keys []string `json:"keys,omitzero"`

	Call   int64 `json:"c"`
	Return int64 `json:"r,omitzero"`

	Value  string            `json:"v,omitzero"`  // a Set's value; a read's or load's result
	Values map[string]string `json:"vs,omitzero"` // a batch's results by key
	Err    string            `json:"err,omitzero"`
	// ErrKind classifies Err: "remote" (cache.ErrRemoteLoad), "notfound",
	// "stale" (cache.ErrStale: a Get's Value is stale),
	// "timeout" (a deadline), "miss" (cache.ErrMiss), "panic", "wait"
	// (cache.ErrWaitTimeout), "other".
	ErrKind string `json:"ek,omitzero"`

	// Flags are what the cache's Observer said of the operation's own
	// context, per key: "hit", "stale", "wait", "failopen", "load".
	Flags map[string][]string `json:"fl,omitzero"`

	Fence  int64  `json:"fence,omitzero"`  // a lock's fencing number
	Status int    `json:"status,omitzero"` // an HTTP status
	Render string `json:"render,omitzero"` // the render an HTTP response came from: "proc.id@callns"
	Cache  string `json:"xc,omitzero"`     // an HTTP response's X-Cache

	Name   string         `json:"name,omitzero"`   // a fault's or failpoint's name
	Detail string         `json:"detail,omitzero"` // what else is worth saying
	Counts map[string]int `json:"counts,omitzero"` // kEnd: goroutines and connections before and after
}

// recorder writes a process's records to its history file.
type recorder struct {
	proc  string
	mu    sync.Mutex // guards everything below
	f     *os.File
	w     *bufio.Writer
	enc   *json.Encoder
	id    int64
	dirty bool
}

func newRecorder(path, proc string) (*recorder, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	w := bufio.NewWriterSize(f, 64<<10)
	return &recorder{proc: proc, f: f, w: w, enc: json.NewEncoder(w)}, nil
}

// nextID returns a new ID unique in the process.
func (r *recorder) nextID() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.id++
	return r.id
}

// write writes rec, stamped with the process.
func (r *recorder) write(rec Record) {
	rec.Proc = r.proc
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.enc.Encode(&rec)
	r.dirty = true
}

// flush writes what is buffered to the file; a process about to crash on
// purpose calls it first.
func (r *recorder) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dirty {
		_ = r.w.Flush()
		r.dirty = false
	}
}

// crash flushes what is buffered and ends the process with status code,
// holding the lock: an operation whose start is not on file cannot begin
// (its start is written before it sends anything).
func (r *recorder) crash(code int) {
	r.mu.Lock()
	_ = r.w.Flush()
	os.Exit(code)
}

// flusher flushes every 100 ms until stop is closed, so that a process
// killed from outside loses at most that much.
func (r *recorder) flusher(stop <-chan struct{}) {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			r.flush()
			return
		case <-t.C:
			r.flush()
		}
	}
}

func (r *recorder) close() error {
	r.flush()
	return r.f.Close()
}

func now() int64 { return time.Now().UnixNano() }
