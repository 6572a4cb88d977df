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
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/hotkv/stampede/gocronlock"
	"github.com/hotkv/stampede/internal/embedded"
	"github.com/hotkv/stampede/lock"
	"github.com/jonboulle/clockwork"
	"github.com/redis/go-redis/v9"
)

const (
	instances = 3
	ticks     = 5
	skew      = 150 * time.Millisecond // instance i's clock is i*skew behind
)

func main() {
	if id := os.Getenv("CRON_INSTANCE"); id != "" {
		n, _ := strconv.Atoi(id)
		if err := instance(n); err != nil {
			fmt.Fprintln(os.Stderr, "instance", id+":", err)
			os.Exit(1)
		}
		return
	}
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gocron:", err)
		os.Exit(1)
	}
}

// run starts the server (unless REDIS_URL names one) and the instances, and
// prints what happened at each tick.
func run() error {
	rdb, url, closeAll, err := embedded.Open(context.Background())
	if err != nil {
		return err
	}
	defer closeAll()
	rdb.Del(context.Background(), "gocron:report")
	fmt.Printf("%d instances, one job per second for %d seconds, server %s\n\n", instances, ticks, url)

	start := time.Now().Truncate(time.Second).Add(2 * time.Second) // first tick, shared by all
	var (
		mu    sync.Mutex
		lines []string
		wg    sync.WaitGroup
		errs  = make(chan error, instances)
	)
	for i := range instances {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "CRON_INSTANCE="+strconv.Itoa(i), "REDIS_URL="+url,
			"CRON_START="+strconv.FormatInt(start.UnixMilli(), 10))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				mu.Lock()
				lines = append(lines, sc.Text())
				mu.Unlock()
			}
			errs <- cmd.Wait()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}

	// Lines are "tick instance verdict".
	byTick := map[string][]string{}
	for _, l := range lines {
		f := strings.SplitN(l, " ", 3)
		byTick[f[0]] = append(byTick[f[0]], "instance-"+f[1]+" "+f[2])
	}
	var order []string
	for t := range byTick {
		order = append(order, t)
	}
	sort.Strings(order)
	ok := true
	for _, t := range order {
		sort.Strings(byTick[t])
		ran := 0
		for _, v := range byTick[t] {
			if strings.HasSuffix(v, "ran the job") {
				ran++
			}
		}
		ok = ok && ran == 1
		fmt.Printf("tick %s\n  %s\n", t, strings.Join(byTick[t], "\n  "))
	}
	if !ok || len(order) != ticks {
		return fmt.Errorf("some tick did not run exactly once")
	}
	fmt.Println("\nevery tick ran exactly once")
	return nil
}

// instance is one replica: a gocron scheduler with a skewed clock running
// the job every second, locked with gocronlock.
func instance(n int) error {
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	c, err := lock.New(rdb, nil)
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
	ms, _ := strconv.ParseInt(os.Getenv("CRON_START"), 10, 64)
	first := time.UnixMilli(ms)
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
			fmt.Println(tick(), name, "ran the job")
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
			fmt.Println(tick(), name, verdict)
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
