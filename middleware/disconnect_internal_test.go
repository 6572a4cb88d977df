package middleware

import (
	"context"
	"errors"
	"testing"
	"time"
)

type testValueKey struct{}

// TestRenderContext: the context of a shared render keeps the load's
// values and ends once both the client's and the load's contexts have
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
			client, endClient := context.WithCancel(context.Background())
			defer endClient()
			base := context.WithValue(context.Background(), testValueKey{}, "request value")
			load, endLoad := context.WithCancelCause(base)
			defer endLoad(nil)

			ctx, stop := renderContext(client, load)
			defer stop()
			if v := ctx.Value(testValueKey{}); v != "request value" {
				t.Errorf("value %v, want the load's", v)
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
