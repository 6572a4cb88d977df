// This file holds the HTTP traffic: every worker serves pages through the
// middleware on a loopback port, over a Cache of its own in a namespace
// all workers share (and the same Host), so one worker's renders answer
// the others. Its clients GET pages, POST to them (which invalidates
// their URL), and purge them by URL and by tag, hard and soft. Every body names its
// render and when that render began, so the checker can tell a page
// rendered before a purge served after it.

package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/middleware"
)

const (
	httpHost  = "robust.test"
	httpPages = 6
)

// pageTags are the tags of page n: its own and its parity's.
func pageTags(n int) []string { return []string{fmt.Sprintf("p%d", n), fmt.Sprintf("t%d", n%2)} }

type web struct {
	w       *worker
	c       *cache.Cache
	mw      *middleware.Middleware
	srv     *http.Server
	served  chan struct{}
	tr      *http.Transport
	client  *http.Client
	base    string
	renders atomic.Int64
}

func (w *worker) openWeb(logger *slog.Logger, near *cache.Near) (*web, error) {
	c, err := cache.New(w.rc, &cache.Options{
		Namespace: w.cfg.Prefix + ":http", Observer: observe,
		Expiry:  cache.ExpiryPolicy{Fresh: time.Second, RefreshBackoff: 100 * time.Millisecond},
		LockTTL: lockTTL, LoadTimeout: loadTimeout, WaitTimeout: waitTimeout,
		PollInterval: poll, FailOpenCooldown: cooldown, Near: near, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	mw, err := middleware.New(c, &middleware.Options{
		Freshness:   middleware.FreshnessPolicy{Fresh: time.Second},
		WaitTimeout: time.Second,
		Tags:        middleware.TagPolicy{Headers: []string{"Surrogate-Key"}},
		Logger:      logger,
	})
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s := &web{w: w, c: c, mw: mw, served: make(chan struct{}), base: "http://" + ln.Addr().String()}
	s.srv = &http.Server{Handler: w.linkOp(mw.Handler(http.HandlerFunc(s.page))), ReadHeaderTimeout: 10 * time.Second}
	s.tr = &http.Transport{MaxIdleConnsPerHost: 8, IdleConnTimeout: time.Minute}
	s.client = &http.Client{Transport: s.tr, Timeout: opTimeout}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

func (s *web) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	<-s.served
	s.tr.CloseIdleConnections()
	_ = s.c.Close()
}

// page renders /p/{n}: public for a second (odd pages stale for a second
// more), tagged, naming its render and when it began. One render in 25 of
// an even page fails with a 500, for stale-if-error. A POST answers 200,
// not stored.
func (s *web) page(rw http.ResponseWriter, r *http.Request) {
	start := now()
	id := s.w.rec.nextID()
	n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/p/"))
	if err != nil || n < 0 || n >= httpPages {
		http.NotFound(rw, r)
		return
	}
	if r.Method == http.MethodPost {
		rw.Header().Set("Cache-Control", "no-store")
		_, _ = io.WriteString(rw, "posted")
		return
	}
	time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // the render's work
	h := rw.Header()
	cc := "public, max-age=1"
	if n%2 == 1 {
		cc += ", stale-while-revalidate=1"
	}
	if n%3 == 0 {
		cc += ", stale-if-error=2"
	}
	h.Set("Cache-Control", cc)
	h.Set("Surrogate-Key", strings.Join(pageTags(n), " "))
	if n%2 == 0 && rand.IntN(25) == 0 {
		rw.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(rw, "failed")
		return
	}
	s.renders.Add(1)
	fmt.Fprintf(rw, "R %d %s.%d %d", n, s.w.cfg.Proc, id, start)
}

func (w *worker) httpTraffic(ctx context.Context, r *rand.Rand) {
	s := w.web
	for pause(ctx, time.Duration(r.IntN(15))*time.Millisecond) {
		n := r.IntN(httpPages)
		path := fmt.Sprintf("/p/%d", n)
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		switch p := r.IntN(100); {
		case p < 80:
			w.httpDo(octx, s, http.MethodGet, path, kHTTP)
		case p < 85:
			w.httpDo(octx, s, http.MethodPost, path, kPost)
		case p < 90:
			pctx, info, rec := w.begin(octx, Record{Kind: kPurgeURL, Key: path})
			w.end(info, rec, s.mw.PurgeURL(pctx, "http://"+httpHost+path, nil))
		case p < 93:
			pctx, info, rec := w.begin(octx, Record{Kind: kSoftPurgeURL, Key: path})
			w.end(info, rec, s.mw.SoftPurgeURL(pctx, "http://"+httpHost+path, nil))
		case p < 96:
			tag := pageTags(n)[r.IntN(2)]
			pctx, info, rec := w.begin(octx, Record{Kind: kSoftPurgeTag, Key: tag})
			if w.cfg.sabotaged("softpurge") {
				// Sabotage: a soft purge that says it happened and did not.
				w.end(info, rec, nil)
				break
			}
			w.end(info, rec, s.mw.SoftPurgeTag(pctx, tag))
		default:
			tag := pageTags(n)[r.IntN(2)]
			pctx, info, rec := w.begin(octx, Record{Kind: kPurgeTag, Key: tag})
			if w.cfg.sabotaged("purge") {
				// Sabotage: a tag purge that says it happened and did not.
				w.end(info, rec, nil)
				break
			}
			w.end(info, rec, s.mw.PurgeTag(pctx, tag))
		}
		cancel()
	}
}

func (w *worker) httpDo(ctx context.Context, s *web, method, path, kind string) {
	ctx, info, rec := w.begin(ctx, Record{Kind: kind, Key: path, Near: w.cfg.Near})
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, nil)
	if err != nil {
		w.end(info, rec, err)
		return
	}
	req.Host = httpHost
	req.Header.Set(opHeader, strconv.FormatInt(info.id, 10))
	w.httpOps.Store(info.id, info)
	defer w.httpOps.Delete(info.id)
	resp, err := s.client.Do(req)
	if err != nil {
		w.end(info, rec, err)
		return
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	rec.Status, rec.Cache = resp.StatusCode, resp.Header.Get("X-Cache")
	if kind == kHTTP && resp.StatusCode == http.StatusOK {
		// "R n proc.id start"
		f := strings.Fields(string(body))
		if len(f) == 4 && f[0] == "R" && f[1] == strings.TrimPrefix(path, "/p/") {
			rec.Render = f[2] + "@" + f[3]
		} else {
			rec.Detail = fmt.Sprintf("wrong body %q", body)
		}
	}
	w.end(info, rec, err)
}

// opHeader carries an HTTP operation's ID from its client to the worker's
// server, so that what the middleware's cache does for the request (its
// Observer's events, its failpoints, its servers' errors) is recorded on
// the operation, as for the cache's own traffic.
const opHeader = "X-Robust-Op"

// linkOp gives each request the opInfo of the operation its opHeader
// names, if it is one of this worker's in flight.
func (w *worker) linkOp(next http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if id, err := strconv.ParseInt(r.Header.Get(opHeader), 10, 64); err == nil {
			if info, ok := w.httpOps.Load(id); ok {
				r = r.WithContext(context.WithValue(r.Context(), opKey{}, info))
			}
		}
		next.ServeHTTP(rw, r)
	})
}
