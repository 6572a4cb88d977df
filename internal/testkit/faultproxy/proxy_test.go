package faultproxy_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/hotkv/stampede/internal/testkit/faultproxy"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echo starts a line echo server and returns its address.
func echo(tb testing.TB) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	tb.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func start(tb testing.TB) *faultproxy.Proxy {
	tb.Helper()
	p, err := faultproxy.Start(echo(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

func dial(tb testing.TB, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	tb.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

func roundTrip(c net.Conn, r *bufio.Reader, line string) (string, error) {
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if len(got) > 0 {
		got = got[:len(got)-1]
	}
	return got, err
}

func TestProxy_forwards(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	for _, line := range []string{"a", "hello", string(make([]byte, 100<<10))} {
		got, err := roundTrip(c, r, line)
		if err != nil || got != line {
			t.Fatalf("round trip of %d bytes: got %d bytes, %v", len(line), len(got), err)
		}
	}
	if s := p.Stats(); s.Accepted != 1 || s.Chunks < 2 {
		t.Fatalf("stats %+v, want 1 accepted and at least 2 chunks", s)
	}
}

func TestProxy_latencyDelaysEachWay(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	const d = 30 * time.Millisecond
	p.SetLatency(d)
	begin := time.Now()
	if got, err := roundTrip(c, r, "x"); err != nil || got != "x" {
		t.Fatalf("round trip: %q, %v", got, err)
	}
	// A lower bound only: both directions are delayed.
	if took := time.Since(begin); took < 2*d {
		t.Fatalf("round trip took %v with %v latency each way", took, d)
	}
	p.SetLatency(0)
	p.SetSpikes(1, d)
	if _, err := roundTrip(c, r, "y"); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Spikes < 2 {
		t.Fatalf("spikes %d with probability 1, want one per direction", s.Spikes)
	}
}

func TestProxy_blackHoleHoldsBytesUntilResume(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before"); err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := r.ReadString('\n'); !isTimeout(err) {
		t.Fatalf("read through a black hole: %v, want a timeout", err)
	}
	// A new connection is accepted but gets no answer either.
	c2, r2 := dial(t, p)
	c2.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := roundTrip(c2, r2, "new"); !isTimeout(err) {
		t.Fatalf("new connection through a black hole: %v, want a timeout", err)
	}
	p.Resume()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("after resume: %q, %v; want the held line", got, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestProxy_resetAndDrop(t *testing.T) {
	p := start(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "x"); err != nil {
		t.Fatal(err)
	}
	if n := p.Reset(); n != 1 {
		t.Fatalf("Reset ended %d connections, want 1", n)
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := roundTrip(c, r, "y"); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, io.EOF) && !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("after Reset: %v, want a reset", err)
	}

	// The reset link leaves the proxy's list when its pumps have ended,
	// a moment after the client saw the reset; Drop must not count it.
	for deadline := time.Now().Add(10 * time.Second); p.Conns() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still open after Reset", p.Conns())
		}
	}
	c2, r2 := dial(t, p)
	if _, err := roundTrip(c2, r2, "x"); err != nil {
		t.Fatal(err)
	}
	if n := p.Drop(); n != 1 {
		t.Fatalf("Drop ended %d connections, want 1", n)
	}
	c2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r2.ReadString('\n'); !errors.Is(err, io.EOF) {
		t.Fatalf("after Drop: %v, want EOF", err)
	}
	if s := p.Stats(); s.Reset != 1 || s.Dropped != 1 {
		t.Fatalf("stats %+v, want 1 reset and 1 dropped", s)
	}
}

func TestProxy_refuse(t *testing.T) {
	p := start(t)
	p.Refuse()
	c, r := dial(t, p)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := roundTrip(c, r, "x"); err == nil {
		t.Fatal("round trip through a refusing proxy succeeded")
	}
	p.Resume()
	c2, r2 := dial(t, p)
	if got, err := roundTrip(c2, r2, "x"); err != nil || got != "x" {
		t.Fatalf("after Resume: %q, %v", got, err)
	}
	if s := p.Stats(); s.Refused != 1 {
		t.Fatalf("stats %+v, want 1 refused", s)
	}
}

func TestProxy_closeEndsEverything(t *testing.T) {
	p, err := faultproxy.Start(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	c, r := dial(t, p)
	if _, err := io.WriteString(c, "x\n"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- p.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return while a black hole held a connection")
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.ReadString('\n'); err == nil {
		t.Fatal("read after Close succeeded")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestProxy_closeAfter(t *testing.T) {
	p := start(t)
	old, oldR := dial(t, p)
	if got, err := roundTrip(old, oldR, "x"); err != nil || got != "x" {
		t.Fatalf("before CloseAfter: %q, %v", got, err)
	}
	p.CloseAfter(1)
	c, r := dial(t, p)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if got, err := roundTrip(c, r, "handshake"); err != nil || got != "handshake" {
		t.Fatalf("first write: %q, %v", got, err)
	}
	if _, err := roundTrip(c, r, "command"); err == nil {
		t.Fatal("second write was answered")
	}
	for i := range 2 { // a connection open before CloseAfter is not touched
		if got, err := roundTrip(old, oldR, "y"); err != nil || got != "y" {
			t.Fatalf("old connection, round trip %d: %q, %v", i, got, err)
		}
	}
	p.Resume()
	c2, r2 := dial(t, p)
	for i := range 2 {
		if got, err := roundTrip(c2, r2, "z"); err != nil || got != "z" {
			t.Fatalf("after Resume, round trip %d: %q, %v", i, got, err)
		}
	}
}
