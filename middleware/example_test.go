package middleware_test

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/middleware"
	"github.com/redis/go-redis/v9"
)

// exampleCache starts an in-process server and a Cache on it for the
// examples; a real program connects to its Redis, Valkey or cluster instead.
func exampleCache() (*cache.Cache, func()) {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	c, err := cache.New(rdb, nil)
	if err != nil {
		panic(err)
	}
	return c, func() { c.Close(); rdb.Close(); mr.Close() }
}

// One route cached with chi's r.With; the second request is answered from
// the cache without running the handler.
func ExampleCache() {
	c, stop := exampleCache()
	defer stop()

	renders := 0
	r := chi.NewRouter()
	r.With(middleware.Cache(c, time.Minute)).Get("/report", func(w http.ResponseWriter, r *http.Request) {
		renders++
		fmt.Fprint(w, "daily report")
	})

	for range 2 {
		w := httptest.NewRecorder()
		r.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/report", nil))
		fmt.Println(w.Code, w.Header().Get("X-Cache"), w.Body.String())
	}
	fmt.Println("renders:", renders)
	// Output:
	// 200 MISS daily report
	// 200 HIT daily report
	// renders: 1
}

// A configured Middleware for every route of a router, with chi's r.Use.
func ExampleMiddleware_Handler() {
	c, stop := exampleCache()
	defer stop()

	m, err := middleware.New(c, &middleware.Options{Freshness: middleware.FreshnessPolicy{Fresh: 5 * time.Minute}})
	if err != nil {
		panic(err)
	}
	renders := 0
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		renders++
		fmt.Fprint(w, "user ", chi.URLParam(r, "id"))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for _, path := range []string{"/users/1", "/users/1", "/users/2"} {
		res, err := srv.Client().Get(srv.URL + path)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Println(path, res.Header.Get("X-Cache"), string(body))
	}
	fmt.Println("renders:", renders)
	// Output:
	// /users/1 MISS user 1
	// /users/1 HIT user 1
	// /users/2 MISS user 2
	// renders: 2
}

// With Keys.Query only the named query parameters are keyed and passed to the
// handler, so tracking parameters neither make new entries nor reach it.
func ExampleOptions_keyQuery() {
	c, stop := exampleCache()
	defer stop()

	m, err := middleware.New(c, &middleware.Options{Keys: middleware.KeyPolicy{Query: []string{"q"}}})
	if err != nil {
		panic(err)
	}
	search := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Println("  handler sees", r.URL.RawQuery)
		fmt.Fprint(w, "results for ", r.URL.Query().Get("q"))
	}))

	for _, target := range []string{"/search?q=go", "/search?q=go&utm_source=x", "/search?q=rust&utm_source=x"} {
		w := httptest.NewRecorder()
		search.ServeHTTP(w, httptest.NewRequest(http.MethodGet, target, nil))
		fmt.Println(target, w.Header().Get("X-Cache"), w.Body.String())
	}
	// Output:
	//   handler sees q=go
	// /search?q=go MISS results for go
	// /search?q=go&utm_source=x HIT results for go
	//   handler sees q=rust
	// /search?q=rust&utm_source=x MISS results for rust
}

// Options.Targeted: the origin tells this cache (a CDN-class cache) with
// CDN-Cache-Control to keep a page a minute, and browsers with
// Cache-Control not to store it; both get what was meant for them.
func ExampleOptions_targeted() {
	c, stop := exampleCache()
	defer stop()

	m, err := middleware.New(c, &middleware.Options{Targeted: []string{"CDN-Cache-Control"}})
	if err != nil {
		panic(err)
	}
	page := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("CDN-Cache-Control", "max-age=60")
		fmt.Fprint(w, "prices")
	}))

	for range 2 {
		w := httptest.NewRecorder()
		page.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/prices", nil))
		fmt.Println(w.Header().Get("X-Cache"), w.Header().Get("Cache-Control"), w.Body.String())
	}
	// Output:
	// MISS no-store prices
	// HIT no-store prices
}

// Options.Observer sees every request the middleware answers, with the
// route it matched and why a request was not cached.
func ExampleOptions_observer() {
	c, stop := exampleCache()
	defer stop()

	m, err := middleware.New(c, &middleware.Options{
		Observer: func(e middleware.Event) {
			// A metrics adapter would count e.Kind.String() by e.Route and
			// observe e.Duration; here the events are printed.
			fmt.Printf("event: %s %s %q\n", e.Kind, e.Route, e.Reason)
		},
	})
	if err != nil {
		panic(err)
	}
	r := chi.NewRouter()
	r.With(m.Handler).Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "user ", chi.URLParam(r, "id"))
	})

	for _, auth := range []string{"", "", "Bearer x"} {
		req := httptest.NewRequest(http.MethodGet, "/users/7", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
		fmt.Println(w.Header().Get("X-Cache"), w.Body.String())
	}
	// Output:
	// event: miss /users/{id} ""
	// MISS user 7
	// event: hit /users/{id} ""
	// HIT user 7
	// event: bypass /users/{id} "authorization"
	// BYPASS user 7
}

// The snippets of README.md and docs/http.md below are these Examples'
// bodies (docs_test.go checks it). They are compiled, not run: they
// connect to a server on localhost:6379.

func report(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "daily report") }

func search(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, r.URL.Query().Get("id")) }

// The middleware on chi routes: the simple form and a configured one.
func Example_chi() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := cache.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.With(middleware.Cache(c, time.Minute)).Get("/report", report) // or r.Use(...)

	m, err := middleware.New(c, &middleware.Options{
		Keys:        middleware.KeyPolicy{Query: []string{"id", "page"}}, // only these are keyed and reach the handler
		StoreLimit:  2 << 20,
		WaitTimeout: 2 * time.Second, // then render yourself, as nginx's proxy_cache_lock_timeout
	})
	if err != nil {
		log.Fatal(err)
	}
	r.Group(func(r chi.Router) {
		r.Use(m.Handler)
		r.Get("/search", search)
	})
	log.Fatal(http.ListenAndServe(":8080", r))
}

// Hot pages answered from process memory.
func Example_near() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := cache.New(rdb, &cache.Options{Near: &cache.Near{MaxEntries: 10_000}})
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(middleware.Cache(c, time.Minute))
	r.Get("/report", report)
}

// A shared cache in front of an origin: the middleware on a reverse proxy,
// with the shared-cache preset, one of its fields turned off again.
func ExampleSharedOptions() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	c, err := cache.New(rdb, nil)
	if err != nil {
		log.Fatal(err)
	}
	o := middleware.SharedOptions()
	o.CacheRequestsWithCookies = false // this origin personalises by cookie without Vary
	m, err := middleware.New(c, o)
	if err != nil {
		log.Fatal(err)
	}
	origin, err := url.Parse("http://app:8000")
	if err != nil {
		log.Fatal(err)
	}
	r := chi.NewRouter()
	r.Use(m.Handler)
	r.Handle("/*", httputil.NewSingleHostReverseProxy(origin))
	log.Fatal(http.ListenAndServe(":8080", r))
}

// Pages list their tags in Surrogate-Key; one PurgeTag removes every page
// of a tag, in every process, however many there are. The tag field never
// reaches the client.
func ExampleMiddleware_PurgeTag() {
	c, stop := exampleCache()
	defer stop()

	m, err := middleware.New(c, &middleware.Options{Tags: middleware.TagPolicy{Headers: []string{"Surrogate-Key"}}})
	if err != nil {
		panic(err)
	}
	price := 10
	page := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Surrogate-Key", "product-42 catalogue")
		fmt.Fprintf(w, "product 42 costs %d", price)
	}))
	get := func() {
		w := httptest.NewRecorder()
		page.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/products/42", nil))
		fmt.Printf("%s %q %s\n", w.Header().Get("X-Cache"), w.Header().Get("Surrogate-Key"), w.Body.String())
	}
	get()
	get()
	price = 12 // the product changes: purge its pages
	if err := m.PurgeTag(context.Background(), "product-42"); err != nil {
		panic(err)
	}
	get()
	// Output:
	// MISS "" product 42 costs 10
	// HIT "" product 42 costs 10
	// MISS "" product 42 costs 12
}

// With Options.Purge, a PURGE request that the authoriser allows removes
// the page of its URL (or, listing tags as a response does, the pages of
// those tags), and never reaches the handler.
func ExampleOptions_purge() {
	c, stop := exampleCache()
	defer stop()

	m, err := middleware.New(c, &middleware.Options{Purge: &middleware.PurgePolicy{
		Authorize: func(r *http.Request) bool {
			vs := r.Header.Values("X-Purge-Key") // one line, the secret
			return len(vs) == 1 && subtle.ConstantTimeCompare([]byte(vs[0]), []byte("s3cret")) == 1
		},
	}})
	if err != nil {
		panic(err)
	}
	renders := 0
	page := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renders++
		fmt.Fprintf(w, "render %d", renders)
	}))
	do := func(method, key string) {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(method, "/news", nil)
		r.Header.Set("X-Purge-Key", key)
		page.ServeHTTP(w, r)
		status, _, _ := strings.Cut(w.Header().Get("Cache-Status"), "; ttl=") // the ttl counts down
		fmt.Printf("%s %d X-Cache: %s | Cache-Status: %s | %s\n", method, w.Code, w.Header().Get("X-Cache"), status, strings.TrimSpace(w.Body.String()))
	}
	do(http.MethodGet, "")
	do("PURGE", "guess")
	do(http.MethodGet, "")
	do("PURGE", "s3cret")
	do(http.MethodGet, "")
	// Output:
	// GET 200 X-Cache: MISS | Cache-Status: stampede; fwd=uri-miss; fwd-status=200; stored | render 1
	// PURGE 403 X-Cache: PURGE; detail=purge-forbidden | Cache-Status:  | purge not allowed
	// GET 200 X-Cache: HIT | Cache-Status: stampede; hit | render 1
	// PURGE 200 X-Cache: PURGE; detail=purged-url | Cache-Status:  | purged
	// GET 200 X-Cache: MISS | Cache-Status: stampede; fwd=uri-miss; fwd-status=200; stored | render 2
}

// PURGE where the middleware sits in a chi group: chi routes before the
// group's middlewares run, so a route takes the PURGE requests
// (chi.RegisterMethod makes chi route the method at all). With the
// middleware in the root router's r.Use, before the routes, no route is
// needed: it sees every request first.
func ExampleMiddleware_PurgeHandler() {
	c, stop := exampleCache()
	defer stop()

	m, err := middleware.New(c, &middleware.Options{Purge: &middleware.PurgePolicy{
		Authorize: func(r *http.Request) bool {
			vs := r.Header.Values("X-Purge-Key")
			return len(vs) == 1 && subtle.ConstantTimeCompare([]byte(vs[0]), []byte("s3cret")) == 1
		},
	}})
	if err != nil {
		panic(err)
	}
	chi.RegisterMethod("PURGE")
	renders := 0
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(m.Handler)
		r.Get("/news", func(w http.ResponseWriter, r *http.Request) {
			renders++
			fmt.Fprintf(w, "render %d", renders)
		})
	})
	r.Method("PURGE", "/*", m.PurgeHandler())

	do := func(method string) {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(method, "/news", nil)
		req.Header.Set("X-Purge-Key", "s3cret")
		r.ServeHTTP(w, req)
		fmt.Printf("%s %d %s | %s\n", method, w.Code, w.Header().Get("X-Cache"), strings.TrimSpace(w.Body.String()))
	}
	do(http.MethodGet)
	do(http.MethodGet)
	do("PURGE")
	do(http.MethodGet)
	// Output:
	// GET 200 MISS | render 1
	// GET 200 HIT | render 1
	// PURGE 200 PURGE; detail=purged-url | purged
	// GET 200 MISS | render 2
}
