// Command cron runs the same scheduled job on several instances, as a
// replicated service does, and shows that each tick exactly one instance
// runs it while the others skip.
//
//	go run ./examples/cron                # embedded server
//	REDIS_URL=redis://localhost:6379 go run ./examples/cron
//
// The instances are separate OS processes (this program started again with
// CRON_INSTANCE set). Their clocks are skewed on purpose by up to 150 ms;
// RunOnce's WithMinHold keeps a late instance from running a tick again after
// the fast job has already finished.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/hotkv/stampede/examples/internal/replicas"
	"github.com/hotkv/stampede/lock"
)

const (
	instances = 3
	ticks     = 5
	skew      = 75 * time.Millisecond // at tick t, instance i's clock is ((i+t) mod instances)*skew behind
)

func main() {
	replicas.Main(replicas.Setup{Name: "cron", Key: "cron:report", Instances: instances, Ticks: ticks}, instance)
}

// instance is one replica: at every tick of its (skewed) clock it tries to
// run the job.
func instance(in replicas.Instance) error {
	n := in.N
	c, err := lock.New(in.Redis, nil)
	if err != nil {
		return err
	}
	first := in.First
	name := strconv.Itoa(n)
	// Ctrl-C or SIGTERM (a pod being stopped) ends the instance between
	// ticks, or cancels the job it is running.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	for i := range ticks {
		tick := first.Add(time.Duration(i) * time.Second)
		late := time.Duration((n+i)%instances) * skew // which clock is behind changes from tick to tick
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(tick.Add(late))):
		}
		ran, err := c.RunOnce(ctx, "cron:report", 30*time.Second, func(ctx context.Context) error {
			select { // the job: fast, so MinHold matters
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
				return nil
			}
		}, lock.WithMinHold(500*time.Millisecond), lock.WithMetadata("instance-"+name))
		switch {
		case ctx.Err() != nil && errors.Is(err, ctx.Err()):
			// Stopped: not "another instance ran it", which is (false, nil).
			return nil
		case err != nil:
			return err
		}
		verdict := "ran the job"
		if !ran {
			verdict = "skipped"
			if info, err := c.Inspect(ctx, "cron:report"); err == nil {
				verdict += " (held by " + info.Metadata + ")"
			}
		}
		in.Report(tick.Format("15:04:05"), verdict)
	}
	return nil
}
