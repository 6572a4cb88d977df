package middleware

import (
	"context"
	"errors"
	"testing"
	"time"
)

type testValueKey struct{}

// TestRenderContext: the context of a shared render keeps the client's
// (the request's) values, not the load's (whose chi routing context is a
// copy), and ends once both the client's and the load's contexts have
// ended, in either order, with the load's cause.
func TestRenderContext(t *testing.T) {
	tests := []struct {
		name        string
		clientFirst bool
	}{
		{"client ends first", true},
		{"load ends first", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelWait()
			client, endClient := context.WithCancel(context.WithValue(context.Background(), testValueKey{}, "request value"))
			defer endClient()
			base := context.WithValue(context.Background(), testValueKey{}, "load value")
			load, endLoad := context.WithCancelCause(base)
			defer endLoad(nil)

			ctx, stop := renderContext(client, load)
			defer stop()
			if v := ctx.Value(testValueKey{}); v != "request value" {
				t.Errorf("value %v, want the request's", v)
			}
			if _, ok := ctx.Deadline(); ok {
				t.Error("a deadline, but neither the client's context nor the load's has one")
			}
			loadErr := errors.New("load timed out")
			first, second := func() { endLoad(loadErr) }, endClient
			if tt.clientFirst {
				first, second = endClient, func() { endLoad(loadErr) }
			}
			// That it outlives the first end is for the tests over HTTP
			// (TestMiddleware_clientGone, TestMiddleware_renderOutlastsLoad):
			// here, nothing tells when the first end has been handled.
			first()
			second()
			select {
			case <-ctx.Done():
			case <-wait.Done():
				t.Fatal("the render's context did not end with both")
			}
			if cause := context.Cause(ctx); !errors.Is(cause, loadErr) {
				t.Errorf("cause %v, want the load's", cause)
			}
		})
	}
}

// TestRenderContext_deadline: the render has the client's (the
// request's) deadline and ends at it, although the load goes on; the
// client going away before it does not end the render.
func TestRenderContext_deadline(t *testing.T) {
	wait, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelWait()
	outer, goAway := context.WithCancel(context.Background())
	defer goAway()
	deadline := time.Now().Add(time.Hour)
	client, endClient := context.WithDeadline(outer, deadline)
	defer endClient()
	load, endLoad := context.WithTimeout(context.Background(), time.Minute)
	defer endLoad()

	ctx, stop := renderContext(client, load)
	defer stop()
	if d, ok := ctx.Deadline(); !ok || !d.Equal(deadline) {
		t.Errorf("deadline %v %v, want the request's %v", d, ok, deadline)
	}
	goAway() // the client goes: Canceled, before the deadline
	<-client.Done()
	if ctx.Err() != nil {
		t.Fatalf("the render ended with its client going: %v", context.Cause(ctx))
	}

	// A deadline that passes ends the render with DeadlineExceeded.
	client2, endClient2 := context.WithTimeout(context.Background(), time.Millisecond)
	defer endClient2()
	ctx2, stop2 := renderContext(client2, load)
	defer stop2()
	select {
	case <-ctx2.Done():
	case <-wait.Done():
		t.Fatal("the render outlived the request's deadline")
	}
	if !errors.Is(ctx2.Err(), context.DeadlineExceeded) || load.Err() != nil {
		t.Errorf("render ended with %v (load %v), want DeadlineExceeded with the load going on", ctx2.Err(), load.Err())
	}
}

// TestRenderContext_stop: stop ends the context and leaves nothing
// waiting on the client's or the load's context.
func TestRenderContext_stop(t *testing.T) {
	client, endClient := context.WithCancel(context.Background())
	defer endClient()
	load, endLoad := context.WithCancel(context.Background())
	defer endLoad()
	ctx, stop := renderContext(client, load)
	stop()
	if ctx.Err() == nil {
		t.Error("the render's context is still live after stop")
	}
}

// TestGiveToClient: a render given to its client ends with that client
// alone, whether the client went before or after.
func TestGiveToClient(t *testing.T) {
	tests := []struct {
		name       string
		goneBefore bool
	}{
		{"client goes after", false},
		{"client gone before", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wait, cancelWait := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelWait()
			client, endClient := context.WithCancel(context.Background())
			defer endClient()
			load, endLoad := context.WithCancel(context.Background())
			defer endLoad()
			ctx, stop := renderContext(client, load)
			defer stop()
			if tt.goneBefore {
				endClient()
			}
			giveToClient(ctx)
			endClient()
			select {
			case <-ctx.Done():
			case <-wait.Done():
				t.Fatal("the render's context did not end with its client")
			}
			if load.Err() != nil {
				t.Fatal("the load ended")
			}
			if cause := context.Cause(ctx); !errors.Is(cause, context.Canceled) {
				t.Errorf("cause %v, want the client's", cause)
			}
		})
	}
	// Outside a render (a background render's context): nothing happens.
	giveToClient(context.Background())
}
