// Command gocron runs one gocron schedule on several instances, as a
// replicated service does, with gocronlock's Locker, and shows that each
// tick exactly one instance runs the job while the others skip.
//
//	go run ./examples/gocron                # embedded server
//	REDIS_URL=redis://localhost:6379 go run ./examples/gocron
//
// The instances are separate OS processes (this program started again with
// CRON_INSTANCE set), each with its own gocron.Scheduler. Their clocks
// (gocron.WithClock) are skewed on purpose, instance i's by i*skew behind;
// the Locker's MinHold keeps a late instance from running a tick again
// after the fast job has already finished and unlocked.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/hotkv/stampede/examples/internal/replicas"
	"github.com/hotkv/stampede/gocronlock"
	"github.com/hotkv/stampede/lock"
	"github.com/jonboulle/clockwork"
)

const (
	instances = 3
	ticks     = 5
	skew      = 150 * time.Millisecond // instance i's clock is i*skew behind
)

func main() {
	replicas.Main(replicas.Setup{Name: "gocron", Key: "gocron:report", Instances: instances, Ticks: ticks}, instance)
}

// instance is one replica: a gocron scheduler with a skewed clock running
// the job every second, locked with gocronlock.
func instance(in replicas.Instance) error {
	n := in.N
	c, err := lock.New(in.Redis, nil)
	if err != nil {
		return err
	}
	name := strconv.Itoa(n)
	locker, err := gocronlock.New(c, &gocronlock.Options{
		MinHold:  700 * time.Millisecond, // most of the 1 s interval, more than the skew
		Metadata: "instance-" + name,
	})
	if err != nil {
		return err
	}
	first := in.First
	clock := skewed{clockwork.NewRealClock(), time.Duration(n) * skew}
	s, err := gocron.NewScheduler(gocron.WithClock(clock), gocron.WithDistributedLocker(locker))
	if err != nil {
		return err
	}
	// tick names the tick this instance is at: its own clock reads about
	// the tick's time.
	tick := func() string { return clock.Now().Round(time.Second).Format("15:04:05") }
	attempts := make(chan struct{}, ticks)
	_, err = s.NewJob(gocron.DurationJob(time.Second),
		gocron.NewTask(func(ctx context.Context) {
			in.Report(tick(), "ran the job")
			select { // the job: fast, so MinHold matters
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
			attempts <- struct{}{}
		}),
		gocron.WithName("report"), // the lock's key: gocron:report
		gocron.WithStartAt(gocron.WithStartDateTime(first)),
		gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			verdict := "skipped"
			if !errors.Is(err, lock.ErrNotObtained) {
				verdict += " (" + err.Error() + ")"
			} else if info, err := c.Inspect(context.Background(), "gocron:report"); err == nil {
				verdict += " (held by " + info.Metadata + ")"
			}
			in.Report(tick(), verdict)
			attempts <- struct{}{}
		})),
	)
	if err != nil {
		return err
	}
	// Ctrl-C or SIGTERM (a pod being stopped) ends the instance.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s.Start()
	for range ticks {
		select {
		case <-ctx.Done():
		case <-attempts:
		}
	}
	return s.Shutdown()
}

// skewed is the real clock, reading offset behind.
type skewed struct {
	clockwork.Clock
	offset time.Duration
}

func (c skewed) Now() time.Time                  { return c.Clock.Now().Add(-c.offset) }
func (c skewed) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c skewed) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }
