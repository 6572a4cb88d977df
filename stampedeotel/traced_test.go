package stampedeotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/hotkv/stampede/loader"
	"github.com/hotkv/stampede/metrics/metricstest"
	"github.com/hotkv/stampede/stampedeotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
)

// Traced puts the load's span under the caller's span, and a background
// refresh's under the span of the call that found the value stale; a
// not-found is an answer, not an error.
func TestTraced(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	b := newBed(t, nil)
	clk := &metricstest.Clock{}
	c, err := cache.New(s.Client(t), &cache.Options{Namespace: redistest.Key(t, "ns"), Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, parent := b.tp.Tracer("test").Start(metricstest.Context(t), "request")
	if _, err := cache.GetOrLoad(ctx, c, "k", stampedeotel.Traced(b.tel, "load k", metricstest.LoadString("v"))); err != nil {
		t.Fatal(err)
	}
	if _, err := cache.GetOrLoad(ctx, c, "gone", stampedeotel.Traced(b.tel, "load gone", func(context.Context) (string, error) {
		return "", loader.ErrNotFound
	})); !errors.Is(err, loader.ErrNotFound) {
		t.Fatal(err)
	}
	parent.End()
	for _, name := range []string{"load k", "load gone"} {
		spans := b.ended(name)
		if len(spans) != 1 {
			t.Fatalf("%d spans %q, want 1", len(spans), name)
		}
		if spans[0].Parent().SpanID() != parent.SpanContext().SpanID() || spans[0].Status().Code != codes.Unset {
			t.Errorf("%s: parent %v status %v; want the request's span, unset", name, spans[0].Parent().SpanID(), spans[0].Status())
		}
	}

	clk.Advance(2 * time.Minute)
	ctx, second := b.tp.Tracer("test").Start(metricstest.Context(t), "second request")
	if v, err := cache.GetOrLoad(ctx, c, "k", stampedeotel.Traced(b.tel, "refresh k", metricstest.LoadString("v2"))); v != "v" || err != nil {
		t.Fatalf("stale GetOrLoad = %q, %v; want the old value", v, err)
	}
	second.End()
	redistest.WaitFor(t, metricstest.Context(t), "the refresh's span", func() bool { return len(b.ended("refresh k")) == 1 })
	if p := b.ended("refresh k")[0].Parent().SpanID(); p != second.SpanContext().SpanID() {
		t.Errorf("refresh span's parent %v, want the stale call's span %v", p, second.SpanContext().SpanID())
	}
}

// Under a Cache whose Observer is the same Telemetry's CacheObserver, a
// load whose loader Traced wraps has one span, Traced's, a child of the
// caller's span, whichever path runs the loader: a miss, a failed load, a
// panic, a background refresh, a load without the server (fail open);
// the CacheObserver still times each load. A batch load, which Traced
// does not wrap, has the CacheObserver's span. No note of Traced's is left
// behind; one that no CacheObserver takes (a Cache observed by nobody) is
// dropped once its load has ended.
func TestTraced_CacheObserver(t *testing.T) {
	s := redistest.Shared(t, redistest.Redis8)
	b := newBed(t, nil)
	tracer := b.tp.Tracer("test")
	clk := &metricstest.Clock{}
	c, err := cache.New(s.Client(t), &cache.Options{Namespace: redistest.Key(t, "ns"),
		Expiry: cache.ExpiryPolicy{Fresh: time.Minute, Stale: 10 * time.Minute}, Now: clk.Now, Observer: b.tel.CacheObserver("users")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	down, err := cache.New(deadClient(t), &cache.Options{Observer: b.tel.CacheObserver("down")})
	if err != nil {
		t.Fatal(err)
	}
	defer down.Close()
	const loads = "stampede.cache.load.duration"
	users := cacheAttr("users")
	boom := errors.New("boom")
	steps := []struct {
		name   string
		call   func(ctx context.Context, load func(context.Context) (string, error)) error
		load   func(context.Context) (string, error)
		status codes.Code
		loads  float64              // the count, after the step, of the histogram point
		point  []attribute.KeyValue // that times the step's load
	}{
		{"miss", func(ctx context.Context, load func(context.Context) (string, error)) error {
			_, err := cache.GetOrLoad(ctx, c, "k", load)
			return err
		}, metricstest.LoadString("v"), codes.Unset, 1, []attribute.KeyValue{users, result("ok")}},
		{"failed load", func(ctx context.Context, load func(context.Context) (string, error)) error {
			if _, err := cache.GetOrLoad(ctx, c, "bad", load); !errors.Is(err, boom) {
				return errors.New("want boom, got " + err.Error())
			}
			return nil
		}, func(context.Context) (string, error) { return "", boom }, codes.Error,
			1, []attribute.KeyValue{users, result("error"), errType("*errors.errorString")}},
		{"panic", func(ctx context.Context, load func(context.Context) (string, error)) error {
			var pe *loader.PanicError
			if _, err := cache.GetOrLoad(ctx, c, "p", load); !errors.As(err, &pe) {
				return errors.New("want a *loader.PanicError")
			}
			return nil
		}, func(context.Context) (string, error) { panic("boom") }, codes.Error,
			1, []attribute.KeyValue{users, result("error"), errType("panic")}},
		{"refresh", func(ctx context.Context, load func(context.Context) (string, error)) error {
			clk.Advance(2 * time.Minute)
			if v, err := cache.GetOrLoad(ctx, c, "k", load); v != "v" || err != nil {
				return errors.New("want the stale value")
			}
			return nil
		}, metricstest.LoadString("v2"), codes.Unset, 2, []attribute.KeyValue{users, result("ok")}},
		{"fail open", func(ctx context.Context, load func(context.Context) (string, error)) error {
			_, err := cache.GetOrLoad(ctx, down, "k", load)
			return err
		}, metricstest.LoadString("v"), codes.Unset, 1, []attribute.KeyValue{cacheAttr("down"), result("ok")}},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			ctx, parent := tracer.Start(metricstest.Context(t), st.name+" request")
			if err := st.call(ctx, stampedeotel.Traced(b.tel, st.name, st.load)); err != nil {
				t.Fatal(err)
			}
			parent.End()
			// A refresh's load is reported after the call returned.
			b.waitFor(t, st.loads, loads, st.point...)
			s := only(t, st.name, b.ended(st.name))
			childOf(t, st.name, s, parent)
			if s.Status().Code != st.status {
				t.Errorf("span status %v, want %v", s.Status(), st.status)
			}
			if n := len(b.ended("stampede.cache.load")); n != 0 {
				t.Errorf("%d stampede.cache.load spans beside Traced's, want none", n)
			}
			if n := stampedeotel.TracedNotes(b.tel); n != 0 {
				t.Errorf("%d notes of Traced's left, want none", n)
			}
		})
	}
	if s := only(t, "panic", b.ended("panic")); attr(s, "error.type") != "panic" {
		t.Errorf("panicked load's span error.type %q, want panic", attr(s, "error.type"))
	}

	ctx, parent := tracer.Start(metricstest.Context(t), "batch request")
	if _, err := cache.GetOrLoadMany(ctx, c, []string{"x", "y"}, func(_ context.Context, keys []string) (map[string]string, error) {
		return map[string]string{"x": "1", "y": "2"}, nil
	}); err != nil {
		t.Fatal(err)
	}
	parent.End()
	childOf(t, "batch load", only(t, "batch load", b.ended("stampede.cache.load")), parent)

	plain, err := cache.New(s.Client(t), &cache.Options{Namespace: redistest.Key(t, "plain")})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := cache.GetOrLoad(metricstest.Context(t), plain, "k", stampedeotel.Traced(b.tel, "unobserved", metricstest.LoadString("v"))); err != nil {
		t.Fatal(err)
	}
	if n := stampedeotel.TracedNotes(b.tel); n != 1 {
		t.Errorf("%d notes after a load no CacheObserver saw, want 1", n)
	}
	redistest.WaitFor(t, metricstest.Context(t), "the note to be dropped", func() bool { return stampedeotel.TracedNotes(b.tel) == 0 })
}
