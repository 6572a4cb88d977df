package redisx

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Batcher sends commands that its callers give it at the same time
// together, in one pipeline, as a client that pipelines on its own
// connection does: fewer writes and reads for the client and the server
// alike, so more commands a second once callers overlap.
//
// A command given while fewer than batchDepth pipelines of the Batcher
// are in flight is sent at once, alone, on the caller's context: a lone
// caller pays nothing. The commands given while they are all in flight
// wait for the first to return and are sent together in the next, by
// their first caller. So a command waits at most one round trip before
// its own.
//
// Each command keeps its own reply and error, as when sent alone; a
// failed connection fails every command of its pipeline. A caller whose
// context ends while its command waits takes it back unsent; once the
// command is on its way, the caller stops waiting but the command may
// still be carried out, as with a command sent alone. A pipeline runs on
// the context of the caller that sends it, without its cancellation.
//
// Only commands that are safe to run in any order relative to other
// callers' commands belong in a Batcher: each caller's own commands stay
// in its order, since it waits for one before giving the next.
//
// A client that pipelines its concurrent callers' commands itself,
// go-redis's AutoPipeliner (Client.AutoPipeline), gets each command at
// once: it streams them on a connection it holds, which batching before
// it would only delay.
//
// The zero Batcher is not usable; use NewBatcher. It is safe for
// concurrent use.
type Batcher struct {
	c        Client
	direct   bool       // c pipelines on its own
	mu       sync.Mutex // guards inflight and queue
	inflight int        // pipelines (or lone commands) on their way
	queue    []*queued  // the commands for the next pipeline
}

// batchDepth is how many pipelines of a Batcher may be in flight at once:
// with two, one is being written or answered while the other's replies
// are read, and the server is never idle waiting for the client; more
// would only split the queue.
const batchDepth = 2

// queued is one caller's command waiting in a Batcher.
type queued struct {
	cmd  redis.Cmder
	ctx  context.Context
	lead chan struct{} // closed when this caller is to send the batch in next
	done chan struct{} // closed when cmd has its reply
	next []*queued     // the batch this caller sends, set before lead closes
	sent bool          // taken from the queue (under Batcher.mu)
}

// NewBatcher returns a Batcher sending on c.
func NewBatcher(c Client) *Batcher {
	_, direct := c.(*redis.AutoPipeliner)
	return &Batcher{c: c, direct: direct}
}

// Do sends cmd, in a pipeline with the commands given at the same time,
// and returns its error (cmd holds its reply). It returns ctx's error,
// having sent nothing, when ctx ends before cmd is on its way.
func (b *Batcher) Do(ctx context.Context, cmd redis.Cmder) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if b.direct {
		b.process(ctx, cmd)
		return cmd.Err()
	}
	b.mu.Lock()
	if b.inflight < batchDepth {
		b.inflight++
		b.mu.Unlock()
		b.process(ctx, cmd)
		b.handOver()
		return cmd.Err()
	}
	q := &queued{cmd: cmd, ctx: ctx, lead: make(chan struct{}), done: make(chan struct{})}
	b.queue = append(b.queue, q)
	b.mu.Unlock()
	select {
	case <-q.done:
		return cmd.Err()
	case <-q.lead:
		b.send(q.ctx, q.next)
		b.handOver()
		return cmd.Err()
	case <-ctx.Done():
	}
	b.mu.Lock()
	if !q.sent {
		// Still waiting: take it back, unsent.
		b.queue = remove(b.queue, q)
		b.mu.Unlock()
		return ctx.Err()
	}
	b.mu.Unlock()
	select {
	case <-q.lead:
		// It was chosen to send the next pipeline: the others in it
		// wait for that, so it sends it, whatever its own context.
		b.send(q.ctx, q.next)
		b.handOver()
		return cmd.Err()
	case <-q.done:
		return cmd.Err()
	default:
		return ctx.Err() // on its way: stop waiting
	}
}

// handOver ends the pipeline in flight: the commands queued meanwhile
// become the next pipeline, sent by their first caller, or the Batcher
// goes idle.
func (b *Batcher) handOver() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) == 0 {
		b.inflight--
		return
	}
	next := b.queue
	b.queue = nil
	for _, q := range next {
		q.sent = true
	}
	next[0].next = next
	close(next[0].lead)
}

// send sends batch in one pipeline (a lone command as itself) and tells
// every caller in it that its command has its reply.
func (b *Batcher) send(ctx context.Context, batch []*queued) {
	ctx = context.WithoutCancel(ctx)
	if len(batch) == 1 {
		b.process(ctx, batch[0].cmd)
	} else {
		pipe := b.c.Pipeline()
		for _, q := range batch {
			_ = pipe.Process(ctx, q.cmd)
		}
		_, _ = pipe.Exec(ctx) // each command holds its own error
	}
	for _, q := range batch {
		close(q.done)
	}
}

// processor is how a lone command is sent; every go-redis client has it.
type processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// process sends one command.
func (b *Batcher) process(ctx context.Context, cmd redis.Cmder) {
	if p, ok := b.c.(processor); ok {
		_ = p.Process(ctx, cmd)
		return
	}
	pipe := b.c.Pipeline()
	_ = pipe.Process(ctx, cmd)
	_, _ = pipe.Exec(ctx)
}

// remove returns qs without q.
func remove(qs []*queued, q *queued) []*queued {
	for i, x := range qs {
		if x == q {
			return append(qs[:i], qs[i+1:]...)
		}
	}
	return qs
}
