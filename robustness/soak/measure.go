package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

// takeSnapshot collects garbage and counts goroutines and heap. The fault
// proxies' goroutines (five per proxied connection) are counted apart:
// they follow how many idle connections the pools keep, which is the
// harness, not the library.
func takeSnapshot() snapshot {
	s, _ := snapshotStacks()
	return s
}

// snapshotStacks is takeSnapshot that also returns the stacks of the
// goroutines it counts (not the proxies'), grouped as pprof groups them.
func snapshotStacks() (snapshot, string) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := snapshot{Heap: ms.HeapAlloc}
	var buf bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
	// Blocks of "N @ addrs" followed by "#	addr	func+off	file:line"
	// lines, separated by blank lines.
	var own strings.Builder
	_, body, _ := strings.Cut(buf.String(), "\n") // "goroutine profile: total N"
	for _, block := range strings.Split(body, "\n\n") {
		first, _, _ := strings.Cut(block, "\n")
		if !strings.Contains(first, " @ ") {
			continue
		}
		n, err := strconv.Atoi(strings.Fields(first)[0])
		if err != nil {
			continue
		}
		if strings.Contains(block, "internal/testkit/faultproxy.") {
			s.Proxy += n
			continue
		}
		s.Goroutines += n
		own.WriteString(block)
		own.WriteString("\n\n")
	}
	return s, own.String()
}

// errKind names the kind of an error, for the errors table: a sentinel of
// the library where there is one, else the transport failure under it.
func errKind(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, cache.ErrWaitTimeout):
		return "ErrWaitTimeout"
	case errors.Is(err, cache.ErrRemoteLoad):
		return "ErrRemoteLoad"
	case errors.Is(err, lock.ErrLost):
		return "ErrLost"
	case errors.Is(err, lock.ErrNotObtained):
		return "ErrNotObtained"
	case errors.Is(err, lock.ErrNotHeld):
		return "ErrNotHeld"
	case errors.Is(err, errLateRead):
		return "fenced read refused"
	case errors.Is(err, errLateWrite):
		return "fenced write refused"
	case errors.Is(err, context.DeadlineExceeded):
		return "context deadline"
	case errors.Is(err, context.Canceled):
		return "context canceled"
	case errors.Is(err, redis.ErrPoolTimeout):
		return "pool timeout"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, syscall.EPIPE):
		return "broken pipe"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "EOF"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "i/o timeout"
	case errors.Is(err, net.ErrClosed):
		return "use of closed connection"
	}
	s := err.Error()
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return "other: " + s
}
