package scenarios

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotkv/stampede/bench/baselines"
	"github.com/hotkv/stampede/bench/report"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/middleware"
)

// The hot page of the page purge scenario.
const (
	pageURL   = "http://bench.example/hot"
	pageTag   = "hot"
	pageETag  = `"v1"`
	pageCache = "max-age=3600, stale-while-revalidate=3600" // fresh for the whole run; a stale window, so soft purges serve it
)

// pageRender is one render of the hot page.
type pageRender struct {
	At   int64 // µs since the start
	Cond bool  // conditional: If-None-Match was the page's ETag (answered 304)
}

// hotPage is the handler of the page purge scenario: it takes render to
// answer, as an expensive page does, and notes when each render began.
// The page never changes: a conditional request for its ETag is answered
// 304. It is safe for concurrent use.
type hotPage struct {
	render time.Duration
	body   []byte
	mu     sync.Mutex // guards began
	began  []pageRender
}

func newHotPage(render time.Duration) *hotPage {
	return &hotPage{render: render, body: []byte("<!doctype html><title>hot</title>" + strings.Repeat("<p>hot page</p>", 128))}
}

func (p *hotPage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	cond := r.Header.Get("If-None-Match") == pageETag
	p.mu.Lock()
	p.began = append(p.began, pageRender{At: began.UnixMicro(), Cond: cond})
	p.mu.Unlock()
	if err := sleep(r.Context(), p.render); err != nil { // the expensive work
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", pageCache)
	h.Set("ETag", pageETag)
	h.Set("Surrogate-Key", pageTag)
	h.Set("Content-Type", "text/html; charset=utf-8")
	if cond {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	_, _ = w.Write(p.body)
}

// renders returns the renders that began at or after start, their At
// made relative to it.
func (p *hotPage) renders(start time.Time) []pageRender {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []pageRender
	for _, r := range p.began {
		if at := r.At - start.UnixMicro(); at >= 0 {
			out = append(out, pageRender{At: at, Cond: r.Cond})
		}
	}
	return out
}

// runPageJob runs the pod's side of the page purge scenario: it builds
// the approach in front of the hot page, asks for the page once (stampede:
// one render in the fleet, which every pod's first request shares;
// per-process: one render here), says ready and runs the requests.
func runPageJob(rdb *redis.Client, j job, in *bufio.Scanner, say func(string, ...any)) (*podResult, error) {
	ctx := context.Background()
	page := newHotPage(j.Load)
	var h http.Handler
	var purge func(ctx context.Context, kind string) error
	switch j.Approach {
	case report.PageStampede:
		opts := &cache.Options{Namespace: j.NS}
		if j.Near {
			opts.Near = &cache.Near{MaxEntries: 1000}
		}
		c, err := cache.New(rdb, opts)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		if j.Near {
			if err := awaitNear(c, nearWait); err != nil {
				return nil, err
			}
		}
		m, err := middleware.New(c, &middleware.Options{Tags: middleware.TagPolicy{Headers: []string{"Surrogate-Key"}}})
		if err != nil {
			return nil, err
		}
		h = m.Handler(page)
		purge = func(ctx context.Context, kind string) error {
			switch kind {
			case "soft":
				return m.SoftPurgeTag(ctx, pageTag)
			case "hard":
				return m.PurgeTag(ctx, pageTag)
			}
			return fmt.Errorf("no purge %q for %s", kind, j.Approach)
		}
	case report.PagePerProcess:
		// The purge reaches every process as an operator's purge reaches
		// every instance of Souin or Varnish: pod 0 publishes it, and each
		// process drops its copy when told.
		var pc baselines.PageCache
		h = pc.Handler(page)
		channel := j.NS + ":purge"
		sub := rdb.Subscribe(ctx, channel)
		if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
			_ = sub.Close()
			return nil, fmt.Errorf("subscribe to purges: %w", err)
		}
		told := make(chan struct{})
		// Owner: this job; ends when sub is closed (the channel closes).
		go func() {
			defer close(told)
			for range sub.Channel() {
				pc.PurgeAll()
			}
		}()
		defer func() { _ = sub.Close(); <-told }()
		purge = func(ctx context.Context, kind string) error {
			if kind != "every process" {
				return fmt.Errorf("no purge %q for %s", kind, j.Approach)
			}
			return rdb.Publish(ctx, channel, kind).Err()
		}
	default:
		return nil, fmt.Errorf("unknown page approach %q", j.Approach)
	}
	if s, err := servePage(ctx, h); err != nil {
		return nil, fmt.Errorf("warm up: %s: %w", s, err)
	}
	start, err := awaitGo(in, say)
	if err != nil {
		return nil, err
	}
	return runPage(j, h, page, purge, start)
}

// servePage asks h for the hot page and says how it was answered (see
// report.PagePurge.Served); err is set when the answer is not the page.
func servePage(ctx context.Context, h http.Handler) (string, error) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequestWithContext(ctx, http.MethodGet, pageURL, nil))
	if w.Code != http.StatusOK || w.Body.Len() == 0 {
		return "error", fmt.Errorf("status %d, %d bytes", w.Code, w.Body.Len())
	}
	x, cs := w.Header().Get("X-Cache"), w.Header().Get("Cache-Status")
	switch {
	case x == "HIT" && strings.Contains(cs, "collapsed"):
		return "collapsed", nil
	case x == "HIT" || x == "STALE" || x == "MISS":
		return strings.ToLower(x), nil
	case x == "BYPASS" && strings.Contains(cs, "fwd=miss") && strings.Contains(cs, "detail=not-stored"):
		// Its own render, which the middleware gave to it alone: a
		// purge may have overtaken it (see middleware's registerTags).
		return "not stored", nil
	}
	return "X-Cache " + x, nil
}

// runPage sends requests for the hot page at a steady rate (open loop, as
// runHot), timed from their ticks, while pod 0 makes the purges on time.
func runPage(j job, h http.Handler, page *hotPage, purge func(context.Context, string) error, start time.Time) (*podResult, error) {
	var (
		purges   [][2]int64
		purgeErr error
		purger   sync.WaitGroup // purges and purgeErr are read after Wait
	)
	if j.Pod == 0 {
		purger.Go(func() {
			for k, kind := range j.Purges {
				time.Sleep(time.Until(start.Add(time.Duration(k+1) * j.Phase)))
				at := time.Since(start)
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := purge(ctx, kind)
				cancel()
				if err != nil {
					purgeErr = fmt.Errorf("purge %d (%s): %w", k, kind, err)
					return
				}
				purges = append(purges, [2]int64{at.Microseconds(), time.Since(start).Microseconds()})
			}
		})
	}
	interval := time.Duration(float64(time.Second) / j.Rate)
	end := start.Add(j.Duration)
	time.Sleep(time.Until(start.Add(j.PhaseShift)))
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var (
		mu  sync.Mutex // guards res
		res = &podResult{}
		wg  sync.WaitGroup
	)
	for now := time.Now(); now.Before(end); now = <-tick.C {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			s, err := servePage(ctx, h)
			lat := time.Since(now)
			mu.Lock()
			res.record(now.Sub(start), lat, err, true)
			res.Served = append(res.Served, s)
			mu.Unlock()
		})
	}
	wg.Wait()
	purger.Wait()
	if purgeErr != nil {
		return nil, purgeErr
	}
	res.Renders, res.Purges = page.renders(start), purges
	return res, nil
}
