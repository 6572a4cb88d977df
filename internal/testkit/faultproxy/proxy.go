// Package faultproxy is a TCP proxy for tests that puts network faults
// between a client and a real server: added latency, random latency
// spikes, connections closed or reset, traffic black-holed and resumed.
//
// Faults act the way a real network's do, so the byte stream a client
// sees is always a prefix of what the server sent: a black hole holds
// bytes back (TCP keeps retransmitting them) and delivers them on Resume
// if the connection is still open; only Drop and Reset end connections.
//
// A Proxy is safe for concurrent use: tests change faults from one
// goroutine while clients talk through it from others.
//
// A client that learns addresses from its server, such as a Redis Cluster
// client, goes around a single proxy; a Set puts one proxy in front of
// each address and gives the client a Dialer that maps each address to its
// proxy.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Proxy forwards connections accepted on a loopback port to one target.
// Use Start to create a Proxy and Close to stop it.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex // guards everything below
	conns   map[*link]struct{}
	latency time.Duration
	spikeP  float64
	spike   time.Duration
	holed   bool
	resume  chan struct{} // closed on Resume; replaced on BlackHole
	refuse  bool
	after   int // CloseAfter's count for new connections; 0: none
	rng     *rand.Rand
	stats   Stats
	closed  bool

	wg sync.WaitGroup // accept loop and every pump
}

// Stats counts what a Proxy did.
type Stats struct {
	Accepted int // connections accepted
	Refused  int // connections closed at once because of Refuse
	Dropped  int // connections ended by Drop
	Reset    int // connections ended by Reset
	Spikes   int // chunks delayed by a spike
	Chunks   int // chunks forwarded, both directions
}

// Start listens on a free loopback port and forwards every connection to
// target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	resume := make(chan struct{})
	close(resume)
	p := &Proxy{
		ln:     ln,
		target: target,
		conns:  make(map[*link]struct{}),
		resume: resume,
		rng:    rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address, host:port on 127.0.0.1.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetLatency delays every chunk of bytes, in both directions, by d. Bytes
// keep their order; a pipeline of commands is delayed once, not once per
// command. Zero removes the latency.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = max(d, 0)
	p.mu.Unlock()
}

// SetSpikes delays each chunk by an extra d with probability prob (0 to 1),
// on top of SetLatency's. prob 0 turns spikes off.
func (p *Proxy) SetSpikes(prob float64, d time.Duration) {
	p.mu.Lock()
	p.spikeP, p.spike = min(max(prob, 0), 1), max(d, 0)
	p.mu.Unlock()
}

// BlackHole stops delivering bytes on every connection, old and new, until
// Resume: writes still succeed, nothing arrives, and clients see timeouts.
// New connections are accepted (a dial succeeds) but get no answer.
func (p *Proxy) BlackHole() {
	p.mu.Lock()
	if !p.holed {
		p.holed = true
		p.resume = make(chan struct{})
	}
	p.mu.Unlock()
}

// Refuse makes the proxy close new connections at once, as a server that
// is down would, until Resume. Open connections are not touched.
func (p *Proxy) Refuse() {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
}

// CloseAfter makes the proxy close each new connection when its client
// writes again after n writes were forwarded, until Resume: as a server
// that answers a connection's handshake and then goes away. CloseAfter(1)
// lets a client's HELLO through and its first command on the connection
// meet a closed connection. Open connections are not touched; n <= 0
// turns it off.
func (p *Proxy) CloseAfter(n int) {
	p.mu.Lock()
	p.after = max(n, 0)
	p.mu.Unlock()
}

// Resume ends BlackHole, Refuse and CloseAfter and removes latency and spikes. Bytes
// held back by a black hole are delivered on connections still open.
func (p *Proxy) Resume() {
	p.mu.Lock()
	if p.holed {
		p.holed = false
		close(p.resume)
	}
	p.refuse, p.after = false, 0
	p.latency, p.spikeP, p.spike = 0, 0, 0
	p.mu.Unlock()
}

// Drop closes every open connection in an orderly way (FIN), as a server
// or load balancer closing idle connections would. It returns how many.
func (p *Proxy) Drop() int { return p.end(false) }

// Reset aborts every open connection (RST): clients see "connection reset
// by peer" on their next read or write. It returns how many.
func (p *Proxy) Reset() int { return p.end(true) }

func (p *Proxy) end(reset bool) int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.conns))
	for l := range p.conns {
		links = append(links, l)
	}
	if reset {
		p.stats.Reset += len(links)
	} else {
		p.stats.Dropped += len(links)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close(reset)
	}
	return len(links)
}

// Conns returns the number of open connections.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Stats returns the counts so far.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops accepting, ends every connection and waits for the proxy's
// goroutines to finish. It is safe to call more than once.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.end(false)
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed || p.refuse {
			p.stats.Refused++
			p.mu.Unlock()
			_ = c.Close()
			continue
		}
		p.stats.Accepted++
		l := &link{p: p, client: c, after: p.after, done: make(chan struct{})}
		p.conns[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go l.run()
	}
}

// delay is how long a chunk read now waits before delivery.
func (p *Proxy) delay() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Chunks++
	d := p.latency
	if p.spikeP > 0 && p.rng.Float64() < p.spikeP {
		p.stats.Spikes++
		d += p.spike
	}
	return d
}

// gate returns a channel that is closed when bytes may flow.
func (p *Proxy) gate() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume
}

// link is one proxied connection: the client's and the upstream one.
type link struct {
	p        *Proxy
	client   net.Conn
	upstream net.Conn // set once dialled; read only after that in run
	after    int      // close on the client's write after this many (CloseAfter); 0: never

	once sync.Once
	mu   sync.Mutex // guards upstream while closing
	done chan struct{}
}

func (l *link) run() {
	defer l.p.wg.Done()
	defer func() {
		l.close(false)
		l.p.mu.Lock()
		delete(l.p.conns, l)
		l.p.mu.Unlock()
	}()
	up, err := net.DialTimeout("tcp", l.p.target, 5*time.Second)
	if err != nil {
		return
	}
	l.mu.Lock()
	select {
	case <-l.done: // closed while dialling
		l.mu.Unlock()
		_ = up.Close()
		return
	default:
		l.upstream = up
	}
	l.mu.Unlock()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.pump(l.client, up) }()
	go func() { defer wg.Done(); l.pump(up, l.client) }()
	wg.Wait()
}

// close ends both sides once; with reset the client gets an RST.
func (l *link) close(reset bool) {
	l.once.Do(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		close(l.done)
		if reset {
			if tc, ok := l.client.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			if tc, ok := l.upstream.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
		}
		_ = l.client.Close()
		if l.upstream != nil {
			_ = l.upstream.Close()
		}
	})
}

type chunk struct {
	b  []byte
	at time.Time // deliver no earlier than this
}

// pump copies src to dst through the faults: a reader stamps each chunk
// with its delivery time and a writer delivers chunks in order, so latency
// delays a stream instead of adding up per chunk.
func (l *link) pump(src, dst net.Conn) {
	q := make(chan chunk, 64)
	read := make(chan error, 1)
	go func() {
		defer close(q)
		buf := make([]byte, 16<<10)
		var last time.Time
		writes := 0 // chunks read from the client
		for {
			n, err := src.Read(buf)
			if n > 0 && src == l.client && l.after > 0 {
				if writes++; writes > l.after {
					l.close(false)
					read <- err
					return
				}
			}
			if n > 0 {
				at := time.Now().Add(l.p.delay())
				if at.Before(last) {
					at = last // keep order behind a spiked chunk
				}
				last = at
				select {
				case q <- chunk{append([]byte(nil), buf[:n]...), at}:
				case <-l.done:
					read <- err
					return
				}
			}
			if err != nil {
				read <- err
				return
			}
		}
	}()
	if !l.deliver(q, dst) {
		l.close(false)
		for range q { // let the reader finish: closing unblocked its Read
		}
		<-read
		return
	}
	if errors.Is(<-read, io.EOF) {
		// The source closed its side: pass the half-close on so the peer
		// sees EOF and can still answer.
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			return
		}
	}
	l.close(false)
}

// deliver writes the chunks of q to dst in order, each at its time and
// only while no black hole holds them back. It reports whether q ended.
func (l *link) deliver(q <-chan chunk, dst net.Conn) bool {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for c := range q {
		if wait := time.Until(c.at); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-l.done:
				return false
			}
		}
		select {
		case <-l.p.gate():
		case <-l.done:
			return false
		}
		if _, err := dst.Write(c.b); err != nil {
			return false
		}
	}
	return true
}
