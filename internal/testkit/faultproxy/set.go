package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Faults is what a test can do to the traffic of one proxy or of several
// at once: *Proxy implements it, and so does the value Set.All returns.
// The methods mean what Proxy's do.
type Faults interface {
	SetLatency(d time.Duration)
	SetSpikes(prob float64, d time.Duration)
	BlackHole()
	Refuse()
	Resume()
	Drop() int
	Reset() int
	Conns() int
	Stats() Stats
}

var _ Faults = (*Proxy)(nil)

// Set is one Proxy per target address, for a client that learns the
// addresses it dials from its server, as a Redis Cluster client does from
// CLUSTER SLOTS and MOVED replies: pointing such a client at one proxy is
// not enough, since it goes around the proxy to the addresses the server
// names. Give the client Set.Dialer instead (go-redis:
// ClusterOptions.Dialer) and every connection it makes to a target goes
// through that target's proxy, topology refreshes included.
//
// Use StartSet to create a Set and Close to stop it. A Set is safe for
// concurrent use; its targets are fixed when it starts.
type Set struct {
	targets []string          // in the order given to StartSet
	proxies map[string]*Proxy // by target; never changed after StartSet
}

// StartSet starts one Proxy for each target. A target given twice gets one
// proxy. If a proxy cannot start, the ones started are closed.
func StartSet(targets ...string) (*Set, error) {
	if len(targets) == 0 {
		return nil, errors.New("faultproxy: a set needs at least one target")
	}
	s := &Set{proxies: make(map[string]*Proxy, len(targets))}
	for _, t := range targets {
		if _, ok := s.proxies[t]; ok {
			continue
		}
		p, err := Start(t)
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.targets = append(s.targets, t)
		s.proxies[t] = p
	}
	return s, nil
}

// Targets returns the target addresses, in the order given to StartSet.
func (s *Set) Targets() []string { return append([]string(nil), s.targets...) }

// For returns the proxy in front of target, or nil if the Set has none.
func (s *Set) For(target string) *Proxy { return s.proxies[target] }

// All returns Faults that act on every proxy of the Set at once: a fault
// set through it hits every target, Drop and Reset return the total, and
// Conns and Stats add up the proxies'.
func (s *Set) All() Faults { return all{s} }

// Dialer returns a dial function, with the signature of go-redis's
// Options.Dialer and ClusterOptions.Dialer, that connects to the proxy in
// front of addr instead of to addr itself. Only "tcp" networks and the
// Set's targets can be dialled: an address the Set has no proxy for is an
// error naming it, never a direct connection that would bypass the
// faults.
func (s *Set) Dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		p := s.proxies[addr]
		if p == nil {
			return nil, fmt.Errorf("faultproxy: no proxy for %s %q (targets %v)", network, addr, s.targets)
		}
		switch network {
		case "tcp", "tcp4":
		default:
			return nil, fmt.Errorf("faultproxy: cannot dial %q over %s", addr, network)
		}
		var d net.Dialer
		return d.DialContext(ctx, "tcp", p.Addr())
	}
}

// Close closes every proxy of the Set (see Proxy.Close) and returns the
// first error. It is safe to call more than once.
func (s *Set) Close() error {
	var first error
	for _, t := range s.targets {
		if err := s.proxies[t].Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// all is Set.All: every fault fans out to every proxy.
type all struct{ s *Set }

func (a all) each(fn func(p *Proxy)) {
	for _, t := range a.s.targets {
		fn(a.s.proxies[t])
	}
}

func (a all) SetLatency(d time.Duration) { a.each(func(p *Proxy) { p.SetLatency(d) }) }

func (a all) SetSpikes(prob float64, d time.Duration) {
	a.each(func(p *Proxy) { p.SetSpikes(prob, d) })
}

func (a all) BlackHole() { a.each((*Proxy).BlackHole) }
func (a all) Refuse()    { a.each((*Proxy).Refuse) }
func (a all) Resume()    { a.each((*Proxy).Resume) }

func (a all) Drop() (n int) {
	a.each(func(p *Proxy) { n += p.Drop() })
	return n
}

func (a all) Reset() (n int) {
	a.each(func(p *Proxy) { n += p.Reset() })
	return n
}

func (a all) Conns() (n int) {
	a.each(func(p *Proxy) { n += p.Conns() })
	return n
}

func (a all) Stats() (st Stats) {
	a.each(func(p *Proxy) { st = st.add(p.Stats()) })
	return st
}

// add returns the sum of s and o.
func (s Stats) add(o Stats) Stats {
	return Stats{
		Accepted: s.Accepted + o.Accepted,
		Refused:  s.Refused + o.Refused,
		Dropped:  s.Dropped + o.Dropped,
		Reset:    s.Reset + o.Reset,
		Spikes:   s.Spikes + o.Spikes,
		Chunks:   s.Chunks + o.Chunks,
	}
}
