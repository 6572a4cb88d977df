package report

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress shows which step of a run is going on. On a terminal it
// rewrites one line several times a second (step, label, a bar for steps
// of known length, time spent); elsewhere it prints one line per step. It
// is safe for concurrent use. Use NewProgress to create one and Close to
// stop it.
type Progress struct {
	w     io.Writer
	tty   bool
	total int
	start time.Time

	mu        sync.Mutex // guards the fields below and writes to w
	n         int
	label     string
	stepStart time.Time
	expect    time.Duration
	closed    bool

	stop chan struct{}
	done chan struct{} // closed when the redraw goroutine has ended
}

// NewProgress returns a Progress for a run of total steps writing to w;
// tty says whether w is a terminal that understands carriage returns.
func NewProgress(w io.Writer, tty bool, total int) *Progress {
	p := &Progress{w: w, tty: tty, total: total, start: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	if !tty {
		close(p.done)
		return p
	}
	go p.redraw()
	return p
}

func (p *Progress) redraw() {
	defer close(p.done)
	t := time.NewTicker(150 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			p.draw()
			p.mu.Unlock()
		}
	}
}

// Step starts the next step; expect is how long it should take, or 0 if
// unknown.
func (p *Progress) Step(label string, expect time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.endLine()
	p.n++
	p.label, p.stepStart, p.expect = label, time.Now(), expect
	if !p.tty {
		fmt.Fprintf(p.w, "[%*d/%d] %s", width(p.total), p.n, p.total, label)
		return
	}
	p.draw()
}

// endLine completes a step's line without a terminal: its time; p.mu is
// held.
func (p *Progress) endLine() {
	if !p.tty && p.n > 0 {
		fmt.Fprintf(p.w, " (%.1fs)\n", time.Since(p.stepStart).Seconds())
	}
}

// draw rewrites the line; p.mu is held.
func (p *Progress) draw() {
	if p.n == 0 {
		return
	}
	now := time.Now()
	bar := ""
	if p.expect > 0 {
		const cells = 20
		f := min(1, float64(now.Sub(p.stepStart))/float64(p.expect))
		full := int(f * cells)
		bar = " [" + strings.Repeat("#", full) + strings.Repeat(".", cells-full) + "]"
	}
	fmt.Fprintf(p.w, "\r\033[K[%*d/%d] %s%s %4.1fs  (total %s)", width(p.total), p.n, p.total, p.label, bar,
		now.Sub(p.stepStart).Seconds(), now.Sub(p.start).Round(time.Second))
}

// Close stops the redrawing and ends the line. It is idempotent.
func (p *Progress) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.endLine()
	if p.tty {
		close(p.stop)
	}
	p.mu.Unlock()
	<-p.done
	if p.tty {
		p.mu.Lock()
		fmt.Fprintf(p.w, "\r\033[K")
		p.mu.Unlock()
	}
}

func width(n int) int { return len(fmt.Sprint(n)) }
