// Command httpserver serves an expensive report through the caching
// middleware, so that however many instances run and however many requests
// arrive at once, the report is rendered once per key and TTL.
//
//	go run ./examples/httpserver                     # embedded server, 127.0.0.1:8080
//	REDIS_URL=redis://127.0.0.1:PORT go run ./examples/httpserver -addr 127.0.0.1:8081
//	go run ./examples/httpserver -demo               # two instances, 100 requests
//
// Routes:
//
//	GET /report?region=eu            ~300 ms to render, behind the middleware
//	GET /report/uncached?region=eu   the same handler without it
//	GET /stats                       renders (all instances) and this instance's cache counters
//
// Every render does INCR on the server, so /stats counts the renders of
// every instance. Without REDIS_URL the program starts the embedded server
// and prints its URL, so that more instances can share it. With -demo it
// starts two instances of itself as child processes on free ports, sends
// them concurrent requests and prints what happened; see demo.go.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/embedded"
)

// envChild is set in the instances -demo starts: they stop when their
// stdin closes, so that they never outlive the demo.
const envChild = "HTTPSERVER_CHILD"

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on (\"127.0.0.1:0\" picks a free port)")
	name := flag.String("name", "", "instance name shown in X-Served-By and the report (default: host name and port)")
	ns := flag.String("namespace", "examples/httpserver", "cache namespace and prefix of the render counters; instances that share it share their cache")
	ttl := flag.Duration("ttl", 30*time.Second, "how long a rendered report stays fresh")
	demo := flag.Bool("demo", false, "start two instances on one embedded server, send them concurrent requests, print what happened and exit")
	requests := flag.Int("requests", 100, "with -demo: concurrent requests per burst, split across the two instances")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var err error
	switch {
	case *demo:
		if *requests < 2 {
			fmt.Fprintln(os.Stderr, "httpserver: -requests must be at least 2")
			os.Exit(2)
		}
		err = runDemo(ctx, *requests, *ttl)
	default:
		if *ttl < time.Second {
			fmt.Fprintln(os.Stderr, "httpserver: -ttl must be at least 1s")
			os.Exit(2)
		}
		err = serve(ctx, config{addr: *addr, name: *name, namespace: *ns, ttl: *ttl})
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpserver:", err)
		os.Exit(1)
	}
}

// config is what one instance needs.
type config struct {
	addr, name, namespace string
	ttl                   time.Duration
}

// serve runs one instance until ctx is cancelled (or, in a child of -demo,
// until its stdin closes).
func serve(ctx context.Context, cfg config) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if os.Getenv(envChild) != "" {
		go func() {
			// The parent keeps our stdin open while it needs us.
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
			cancel()
		}()
	}

	rdb, url, closeAll, err := embedded.Open(ctx)
	if err != nil {
		return err
	}
	defer closeAll()

	ln, err := net.Listen("tcp", cfg.addr)
	if err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "localhost"
	}
	if cfg.name == "" {
		// As a pod would be named: by its host (and here, port).
		hn, _ := os.Hostname()
		cfg.name = hn + ":" + port
	}
	a, err := newApp(rdb, cfg)
	if err != nil {
		ln.Close()
		return err
	}
	defer a.close()

	if os.Getenv("REDIS_URL") == "" {
		other := "8081"
		if port == "8081" {
			other = "8082"
		}
		fmt.Printf("embedded server %s (REDIS_URL is not set); start another instance on it with\n", url)
		fmt.Printf("  REDIS_URL=%s go run ./examples/httpserver -addr 127.0.0.1:%s\n", url, other)
	}
	// -demo reads this line to find the instance's address.
	fmt.Printf("instance %s listening on http://%s\n", cfg.name, net.JoinHostPort(host, port))

	srv := &http.Server{Handler: a.routes(), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer scancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}
