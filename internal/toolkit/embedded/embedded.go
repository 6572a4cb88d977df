// Package embedded runs the zero-set-up server the demos and the bench use
// by default: miniredis, in-process but listening on loopback so that
// worker processes can connect to it, with keys expiring in real time.
// REDIS_URL points the same programs at a real server instead.
package embedded

import (
	"context"
	"errors"
	"fmt"
	neturl "net/url"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is a running miniredis. Use Start to create one.
type Server struct {
	m          *miniredis.Miniredis
	stop, done chan struct{}
}

// Start starts miniredis on a free loopback port.
func Start() (*Server, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("embedded: start miniredis: %w", err)
	}
	s := &Server{m: m, stop: make(chan struct{}), done: make(chan struct{})}
	go s.clock()
	return s, nil
}

// clock makes keys expire in real time, as on a real server: miniredis on
// its own only expires them when told to (FastForward).
func (s *Server) clock() {
	defer close(s.done)
	t := time.NewTicker(10 * time.Millisecond) // FastForward scans every key: not too often
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			s.m.FastForward(now.Sub(last))
			last = now
		}
	}
}

// Addr returns the server's host:port.
func (s *Server) Addr() string { return s.m.Addr() }

// Kill closes the listener and every connection, keeping the data, as a
// crashed server looks to its clients; Restart brings it back.
func (s *Server) Kill() { s.m.Close() }

// Restart starts a killed server again on the same address.
func (s *Server) Restart() error { return s.m.Restart() }

// Close stops the server and its clock.
func (s *Server) Close() {
	select {
	case <-s.stop:
		return
	default:
	}
	close(s.stop)
	<-s.done
	s.m.Close()
}

// Open returns a client for the server named by REDIS_URL (a redis:// or
// rediss:// URL), or, without it, for a new embedded server, once the
// server has answered a PING (bounded by ctx). It also returns the address
// worker processes should use (a URL) and a function that closes the
// client and stops the embedded server.
//
// NOTE: the URL may carry a password; print Redacted(url), never url.
func Open(ctx context.Context) (rdb *redis.Client, url string, closeAll func(), err error) {
	if url = os.Getenv("REDIS_URL"); url != "" {
		opts, err := redis.ParseURL(url)
		if err != nil {
			// net/url's errors quote the URL, password and all: keep
			// only what was wrong with it.
			if ue := (*neturl.Error)(nil); errors.As(err, &ue) {
				err = ue.Err
			}
			return nil, "", nil, fmt.Errorf("embedded: REDIS_URL %s: %w", Redacted(url), err)
		}
		rdb = redis.NewClient(opts)
		closeAll = func() { rdb.Close() }
	} else {
		s, err := Start()
		if err != nil {
			return nil, "", nil, err
		}
		url = "redis://" + s.Addr()
		rdb = redis.NewClient(&redis.Options{Addr: s.Addr()})
		closeAll = func() { rdb.Close(); s.Close() }
	}
	if err := rdb.Ping(ctx).Err(); err != nil {
		closeAll()
		return nil, "", nil, fmt.Errorf("server %s: %w", Redacted(url), err)
	}
	return rdb, url, closeAll, nil
}

// Redacted returns raw, a server URL, fit to print: its password, if it
// has one, replaced by "xxxxx"; a URL that does not parse is not shown.
func Redacted(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	return u.Redacted()
}
