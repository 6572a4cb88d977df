// Command cron runs the same scheduled job on several instances, as a
// replicated service does, and shows that each tick exactly one instance
// runs it while the others skip.
//
//	go run ./examples/cron                # embedded server
//	REDIS_URL=redis://localhost:6379 go run ./examples/cron
//
// The instances are separate OS processes (this program started again with
// CRON_INSTANCE set). Their clocks are skewed on purpose by up to 150 ms;
// RunOnce's MinHold keeps a late instance from running a tick again after
// the fast job has already finished.
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

	"github.com/hotkv/stampede/internal/embedded"
	"github.com/hotkv/stampede/lock"
	"github.com/redis/go-redis/v9"
)

const (
	instances = 3
	ticks     = 5
	skew      = 75 * time.Millisecond // at tick t, instance i's clock is ((i+t) mod instances)*skew behind
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
		fmt.Fprintln(os.Stderr, "cron:", err)
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
	rdb.Del(context.Background(), "cron:report")
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

// instance is one replica: at every tick of its (skewed) clock it tries to
// run the job.
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
	ms, _ := strconv.ParseInt(os.Getenv("CRON_START"), 10, 64)
	first := time.UnixMilli(ms)
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
		}, &lock.RunOnceOptions{MinHold: 500 * time.Millisecond, Metadata: "instance-" + name})
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
		fmt.Println(tick.Format("15:04:05"), name, verdict)
	}
	return nil
}
