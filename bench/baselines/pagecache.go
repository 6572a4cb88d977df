package baselines

import (
	"bytes"
	"net/http"
	"sync"

	"golang.org/x/sync/singleflight"
)

// PageCache is an HTTP page cache in process memory, with its requests
// for one page coalesced per process: the model of what Souin (with its
// in-memory storage) and Varnish do in each instance. A page is stored
// once rendered and served until purged; concurrent requests for a page
// not stored share one render of it (golang.org/x/sync/singleflight), so
// a fleet of N processes renders a purged page N times, once in each,
// and every request that comes meanwhile waits for its process's render.
// Purge drops the page in this process only: a fleet is purged by telling
// every process (as Souin's and Varnish's purge APIs are called on every
// instance). There are no HTTP rules: every 200 is stored, whatever its
// header says, and conditional requests are not made.
//
// Each response says how it was answered, as the middleware does:
// "X-Cache: HIT" from the stored page, "X-Cache: MISS" from the request's
// own render, and "X-Cache: HIT" with "Cache-Status: pagecache; fwd=miss;
// collapsed" from the render of another request of this process that it
// waited for.
//
// A PageCache is safe for concurrent use; the zero value is an empty
// cache, ready for use.
type PageCache struct {
	mu    sync.RWMutex // guards pages; never held while rendering
	pages map[string]*Page
	g     singleflight.Group
}

// Page is a stored response.
type Page struct {
	Status int
	Header http.Header
	Body   []byte
}

// Key returns the key of r's page: its host and request target.
func Key(r *http.Request) string { return r.Host + r.URL.RequestURI() }

// Handler serves GET requests from the cache, rendering with next what
// is not stored; other methods go to next untouched.
func (pc *PageCache) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			next.ServeHTTP(w, r)
			return
		}
		key := Key(r)
		if p := pc.get(key); p != nil {
			p.write(w, "HIT", "pagecache; hit")
			return
		}
		leader := false // set only by the call that renders: Do runs fn in one caller
		v, _, _ := pc.g.Do(key, func() (any, error) {
			leader = true
			if p := pc.get(key); p != nil { // stored while this request looked
				return p, nil
			}
			rec := &recorder{header: http.Header{}, status: http.StatusOK}
			next.ServeHTTP(rec, r)
			p := &Page{Status: rec.status, Header: rec.header, Body: rec.body.Bytes()}
			if p.Status == http.StatusOK {
				pc.mu.Lock()
				if pc.pages == nil {
					pc.pages = map[string]*Page{}
				}
				pc.pages[key] = p
				pc.mu.Unlock()
			}
			return p, nil
		})
		p := v.(*Page)
		if leader {
			p.write(w, "MISS", "pagecache; fwd=miss; stored")
			return
		}
		p.write(w, "HIT", "pagecache; fwd=miss; collapsed")
	})
}

// Purge drops the page of key (see Key) from this process; a render in
// flight is still stored when it ends, as in the caches it models.
func (pc *PageCache) Purge(key string) {
	pc.mu.Lock()
	delete(pc.pages, key)
	pc.mu.Unlock()
}

// PurgeAll drops every page from this process.
func (pc *PageCache) PurgeAll() {
	pc.mu.Lock()
	clear(pc.pages)
	pc.mu.Unlock()
}

func (pc *PageCache) get(key string) *Page {
	pc.mu.RLock()
	defer pc.mu.RUnlock()
	return pc.pages[key]
}

// write sends p with the status header x and cs as Cache-Status. p is
// shared: its header is copied, never changed.
func (p *Page) write(w http.ResponseWriter, x, cs string) {
	h := w.Header()
	for k, vs := range p.Header {
		h[k] = append([]string(nil), vs...)
	}
	h.Set("X-Cache", x)
	h.Set("Cache-Status", cs)
	w.WriteHeader(p.Status)
	_, _ = w.Write(p.Body)
}

// recorder keeps what a handler writes.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
