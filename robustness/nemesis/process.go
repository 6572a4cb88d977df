package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

func (r *run) pause(ctx context.Context) error {
	if r.srv.Kind == redistest.Cluster {
		return r.pauseMaster(ctx)
	}
	r.rec.Start = time.Now()
	if err := r.srv.PauseNode(0); err != nil {
		return fmt.Errorf("nemesis: pause: %w", err)
	}
	cut := hold(ctx, r.d, nil)
	err := r.srv.ResumeNode(0)
	r.rec.Detail = fmt.Sprintf("SIGSTOP, SIGCONT after %v", time.Since(r.rec.Start).Round(time.Millisecond))
	return errors.Join(cut, restoreErr(Pause, err))
}

func (r *run) pauseKill(ctx context.Context) error {
	st, err := takeState(ctx, r.admin)
	if err != nil {
		return fmt.Errorf("nemesis: pause-kill: %w", err)
	}
	r.rec.Start = time.Now()
	if err := r.srv.PauseNode(0); err != nil {
		return fmt.Errorf("nemesis: pause-kill: %w", err)
	}
	cut := hold(ctx, r.d, nil)
	paused := time.Since(r.rec.Start)
	rctx, cancel := r.restoreCtx(ctx)
	defer cancel()
	took, err := r.restartNow(rctx, st)
	r.rec.Detail = fmt.Sprintf("SIGSTOP, SIGKILL after %v, up again after %v", paused.Round(time.Millisecond), took.Round(time.Millisecond))
	return errors.Join(cut, restoreErr(PauseKill, err))
}

func (r *run) restart(ctx context.Context) error {
	st, err := takeState(ctx, r.admin)
	if err != nil {
		return fmt.Errorf("nemesis: restart: %w", err)
	}
	r.rec.Start = time.Now()
	rctx, cancel := r.restoreCtx(ctx)
	defer cancel()
	took, err := r.restartNow(rctx, st)
	r.rec.Detail = fmt.Sprintf("SIGKILL, up again after %v", took.Round(time.Millisecond))
	return restoreErr(Restart, err)
}

// restartNow kills the server, starts it again on its port and gives it
// back st. It returns how long the server was down.
func (r *run) restartNow(ctx context.Context, st state) (time.Duration, error) {
	killed := time.Now()
	r.srv.Kill()
	// Restart returns once the server answers PING, that is once it has
	// loaded its append-only file.
	if err := r.srv.Restart(); err != nil {
		return time.Since(killed), err
	}
	took := time.Since(killed)
	// The old client's connections died with the server.
	_ = r.admin.Close()
	r.admin = newAdmin(r.addr)
	return took, st.restore(ctx, r.admin)
}

// state is what a server loses when it is restarted, beyond its data: the
// configuration set at run time and the ACL users.
type state struct {
	config map[string]string   // CONFIG GET *
	users  map[string][]string // aclList
}

// takeState returns the server's state, and saves its users to its ACL
// file if it has one: a restart then loads them before it takes a
// connection, and restore finds nothing to do.
func takeState(ctx context.Context, c *redis.Client) (state, error) {
	st, err := readState(ctx, c)
	if err != nil {
		return state{}, err
	}
	return st, saveUsers(ctx, c)
}

func readState(ctx context.Context, c *redis.Client) (state, error) {
	cfg, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		return state{}, fmt.Errorf("CONFIG GET *: %w", err)
	}
	users, err := aclList(ctx, c)
	if err != nil {
		return state{}, err
	}
	return state{config: cfg, users: users}, nil
}

// restore sets every configuration value that differs from st's and
// gives every user st's rules, deleting users st did not have.
func (st state) restore(ctx context.Context, c *redis.Client) error {
	now, err := readState(ctx, c)
	if err != nil {
		return err
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(st.config)) {
		if v, ok := now.config[k]; ok && v != st.config[k] {
			errs = append(errs, configSet(ctx, c, k, st.config[k]))
		}
	}
	changed := map[string][]string{}
	for n, rules := range st.users {
		if !slices.Equal(rules, now.users[n]) {
			changed[n] = rules
		}
	}
	errs = append(errs, setUsers(ctx, c, changed))
	dirty := len(changed) > 0
	for n := range now.users {
		if _, ok := st.users[n]; !ok {
			dirty = true
			if err := c.Do(ctx, "ACL", "DELUSER", n).Err(); err != nil {
				errs = append(errs, fmt.Errorf("ACL DELUSER %s: %w", n, err))
			}
		}
	}
	if dirty {
		errs = append(errs, saveUsers(ctx, c))
	}
	return errors.Join(errs...)
}
