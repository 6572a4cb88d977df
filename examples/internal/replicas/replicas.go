// Package replicas runs an example program again as several instances of a
// replicated service sharing one server, and reports tick by tick which
// instance ran a scheduled job: the scaffolding of examples/cron and
// examples/gocron, which differ only in how an instance runs its job.
package replicas

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hotkv/stampede/internal/toolkit/embedded"
	"github.com/redis/go-redis/v9"
)

// Setup describes the run.
type Setup struct {
	Name      string // the program's name, for messages
	Key       string // the job's lock key, deleted before the run
	Instances int
	Ticks     int // the job runs once a second, Ticks times
}

// Instance is what one instance is told: its number, the server and the
// time of the first tick, shared by all.
type Instance struct {
	N     int
	Redis *redis.Client // the shared server, closed when the instance returns
	First time.Time
}

// Report prints the line Main collects: "tick instance verdict", where
// verdict is "ran the job" or starts with "skipped".
func (in Instance) Report(tick, verdict string) {
	fmt.Println(tick, in.N, verdict)
}

const envInstance = "CRON_INSTANCE"

// Main runs the program: as an instance (this program started again by
// Main) it calls instance, otherwise it starts the server (unless
// REDIS_URL names one) and the instances, prints what happened at each
// tick and fails unless every tick ran exactly once. It exits the process
// on failure.
func Main(s Setup, instance func(Instance) error) {
	if id := os.Getenv(envInstance); id != "" {
		n, _ := strconv.Atoi(id)
		if err := runInstance(n, instance); err != nil {
			fmt.Fprintln(os.Stderr, "instance", id+":", err)
			os.Exit(1)
		}
		return
	}
	if err := run(s); err != nil {
		fmt.Fprintln(os.Stderr, s.Name+":", err)
		os.Exit(1)
	}
}

func runInstance(n int, instance func(Instance) error) error {
	opts, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ms, _ := strconv.ParseInt(os.Getenv("CRON_START"), 10, 64)
	return instance(Instance{N: n, Redis: rdb, First: time.UnixMilli(ms)})
}

func run(s Setup) error {
	rdb, url, closeAll, err := embedded.Open(context.Background())
	if err != nil {
		return err
	}
	defer closeAll()
	rdb.Del(context.Background(), s.Key)
	fmt.Printf("%d instances, one job per second for %d seconds, server %s\n\n", s.Instances, s.Ticks, embedded.Redacted(url))

	start := time.Now().Truncate(time.Second).Add(2 * time.Second) // first tick, shared by all
	var (
		mu    sync.Mutex
		lines []string
		wg    sync.WaitGroup
		errs  = make(chan error, s.Instances)
	)
	for i := range s.Instances {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), envInstance+"="+strconv.Itoa(i), "REDIS_URL="+url,
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
	return summarise(lines, s.Ticks)
}

// summarise prints the instances' lines by tick and checks that each tick
// ran exactly once.
func summarise(lines []string, ticks int) error {
	byTick := map[string][]string{}
	for _, l := range lines {
		f := strings.SplitN(l, " ", 3)
		if len(f) != 3 {
			return fmt.Errorf("unexpected line from an instance: %q", l)
		}
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
