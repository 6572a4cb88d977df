package main

import (
	"bytes"
	"context"
	"net"
	"sync/atomic"
)

// What a worker counts on its connections to the server: bytes read by
// the kind of connection, and the pub/sub and tracking messages among
// them. The server's bytes out are every client's bytes in, so these add
// up (with the controller's own) to INFO's total_net_output_bytes.
type connCounts struct {
	cmdBytes  atomic.Int64 // read on connections that never subscribed nor tracked: replies to commands
	subBytes  atomic.Int64 // read on pub/sub connections: messages and (un)subscribe confirmations
	messages  atomic.Int64 // "message" pushes: classic PUBLISH deliveries
	smessages atomic.Int64 // "smessage" pushes: sharded SPUBLISH deliveries
	invals    atomic.Int64 // CLIENT TRACKING invalidations: RESP3 "invalidate" pushes, or RESP2 messages on __redis__:invalidate (counted here, not in messages)
	subConns  atomic.Int64 // connections that sent SUBSCRIBE or SSUBSCRIBE
}

// counts is a snapshot of connCounts, as a worker reports it.
type counts struct {
	CmdBytes, SubBytes          int64
	Messages, SMessages, Invals int64
	SubConns                    int64
	Waits, Loads                int64 // the Cache's own Stats
}

func (c *connCounts) snapshot() counts {
	return counts{
		CmdBytes: c.cmdBytes.Load(), SubBytes: c.subBytes.Load(),
		Messages: c.messages.Load(), SMessages: c.smessages.Load(), Invals: c.invals.Load(),
		SubConns: c.subConns.Load(),
	}
}

// sub returns c - o, field by field.
func (c counts) sub(o counts) counts {
	return counts{
		CmdBytes: c.CmdBytes - o.CmdBytes, SubBytes: c.SubBytes - o.SubBytes,
		Messages: c.Messages - o.Messages, SMessages: c.SMessages - o.SMessages, Invals: c.Invals - o.Invals,
		SubConns: c.SubConns - o.SubConns, Waits: c.Waits - o.Waits, Loads: c.Loads - o.Loads,
	}
}

// add returns c + o, field by field.
func (c counts) add(o counts) counts {
	return counts{
		CmdBytes: c.CmdBytes + o.CmdBytes, SubBytes: c.SubBytes + o.SubBytes,
		Messages: c.Messages + o.Messages, SMessages: c.SMessages + o.SMessages, Invals: c.Invals + o.Invals,
		SubConns: c.SubConns + o.SubConns, Waits: c.Waits + o.Waits, Loads: c.Loads + o.Loads,
	}
}

// Push frames as RESP2 and RESP3 both spell them: the kind is the first
// bulk string of the message. Payloads in this bench (keys, values of
// 'x's, tokens) never contain these byte sequences.
var (
	patMessage    = []byte("$7\r\nmessage\r\n")
	patSMessage   = []byte("$8\r\nsmessage\r\n")
	patInvalidate = []byte("$10\r\ninvalidate\r\n")
	patInvalMsg   = []byte("$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n")
)

// patTail is how many bytes of a read are kept to find a pattern split
// between two reads: one less than the longest pattern.
const patTail = 42

// connKind says what a connection has been used for, judged by what the
// client wrote on it: commands, until it subscribes.
const (
	kindCmd = iota
	kindSub
)

// countConn counts what is read on one connection. go-redis reads a
// connection from one goroutine at a time and writes from one, so the
// fields below need no lock; the totals are atomic.
type countConn struct {
	net.Conn
	c    *connCounts
	kind atomic.Int32 // kindCmd until the client subscribes on it
	tail []byte       // the end of the previous read
}

func (cc *countConn) Write(p []byte) (int, error) {
	if cc.kind.Load() == kindCmd {
		// SUBSCRIBE or SSUBSCRIBE (the near cache's tracking connection
		// subscribes to __redis__:invalidate).
		if bytes.Contains(bytes.ToLower(p), []byte("subscribe\r\n")) && cc.kind.CompareAndSwap(kindCmd, kindSub) {
			cc.c.subConns.Add(1)
		}
	}
	return cc.Conn.Write(p)
}

func (cc *countConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if n > 0 {
		if cc.kind.Load() == kindSub {
			cc.c.subBytes.Add(int64(n))
		} else {
			cc.c.cmdBytes.Add(int64(n))
		}
		buf := append(cc.tail, p[:n]...)
		old := len(cc.tail)
		inval := countNew(buf, old, patInvalMsg)
		cc.c.messages.Add(int64(countNew(buf, old, patMessage) - inval))
		cc.c.smessages.Add(int64(countNew(buf, old, patSMessage)))
		cc.c.invals.Add(int64(inval + countNew(buf, old, patInvalidate)))
		if len(buf) > patTail {
			buf = buf[len(buf)-patTail:]
		}
		cc.tail = append(cc.tail[:0], buf...)
	}
	return n, err
}

// countNew counts the occurrences of pat in buf that end after buf[old]:
// those not counted with the previous read.
func countNew(buf []byte, old int, pat []byte) int {
	n := 0
	for i := 0; ; {
		j := bytes.Index(buf[i:], pat)
		if j < 0 {
			return n
		}
		if i+j+len(pat) > old {
			n++
		}
		i += j + 1
	}
}

// countingDialer returns a dialer for go-redis's Options.Dialer whose
// connections count into c.
func countingDialer(c *connCounts) func(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countConn{Conn: conn, c: c}, nil
	}
}
