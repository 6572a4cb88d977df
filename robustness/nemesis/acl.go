package nemesis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/hotkv/stampede/internal/testkit/redistest"
	"github.com/redis/go-redis/v9"
)

// CreateUser creates the ACL user name (or resets it, if it exists) on
// every process of srv with password and every permission: "on >password
// ~* &* +@all". The suite's workers log in as such a user, so that the
// acl fault can take its write commands away while the coordinator, the
// default user, goes on.
func CreateUser(ctx context.Context, srv *redistest.Server, name, password string) error {
	if srv.Kind == redistest.Miniredis {
		return fmt.Errorf("nemesis: create user: miniredis has no ACL: %w", ErrUnsupported)
	}
	for _, addr := range srv.Addrs() {
		c := newAdmin(addr)
		err := c.Do(ctx, "ACL", "SETUSER", name, "reset", "on", ">"+password, "~*", "&*", "+@all").Err()
		if err == nil {
			err = saveUsers(ctx, c)
		}
		_ = c.Close()
		if err != nil {
			return fmt.Errorf("nemesis: create user %s on %s: %w", name, addr, err)
		}
	}
	return nil
}

// aclRestrict are the rules the acl fault adds to a user's: no command
// that writes to a key and no publishing, which is in no write category.
var aclRestrict = [...]string{"-@write", "-publish", "-spublish"}

func (r *run) acl(ctx context.Context) error {
	before, err := aclList(ctx, r.admin)
	if err != nil {
		return fmt.Errorf("nemesis: acl: %w", err)
	}
	names := r.o.users()
	if len(names) == 0 {
		for n := range before {
			if n != "default" {
				names = append(names, n)
			}
		}
		slices.Sort(names)
	}
	if len(names) == 0 {
		return errors.New("nemesis: acl: no ACL user but default (see CreateUser)")
	}
	saved := make(map[string][]string, len(names))
	for _, n := range names {
		rules, ok := before[n]
		if !ok {
			return fmt.Errorf("nemesis: acl: no ACL user %q", n)
		}
		saved[n] = rules
	}
	r.rec.Start = time.Now()
	r.rec.Detail = fmt.Sprintf("ACL SETUSER %s for %s", strings.Join(aclRestrict[:], " "), strings.Join(names, ", "))
	var injectErr error
	for _, n := range names {
		args := []any{"ACL", "SETUSER", n}
		for _, rule := range aclRestrict {
			args = append(args, rule)
		}
		if injectErr = r.admin.Do(ctx, args...).Err(); injectErr != nil {
			injectErr = fmt.Errorf("nemesis: acl: ACL SETUSER %s: %w", n, injectErr)
			break
		}
	}
	var cut error
	if injectErr == nil {
		cut = hold(ctx, r.d, nil)
	}
	rctx, cancel := r.restoreCtx(ctx)
	defer cancel()
	return errors.Join(injectErr, cut, restoreErr(ACL, setUsers(rctx, r.admin, saved)))
}

// aclList returns the server's users as ACL LIST shows them: user name →
// rules ("on", "#<sha256>", "~*", "(~k* +get)", ...), which ACL SETUSER
// takes back after "reset".
func aclList(ctx context.Context, c *redis.Client) (map[string][]string, error) {
	lines, err := c.Do(ctx, "ACL", "LIST").StringSlice()
	if err != nil {
		return nil, fmt.Errorf("ACL LIST: %w", err)
	}
	out := make(map[string][]string, len(lines))
	for _, l := range lines {
		t := aclTokens(l)
		if len(t) < 2 || t[0] != "user" {
			return nil, fmt.Errorf("ACL LIST: unexpected line %q", l)
		}
		out[t[1]] = t[2:]
	}
	return out, nil
}

// aclTokens splits an ACL LIST line at spaces, keeping each selector,
// "(~key* +get)", whole: ACL SETUSER takes it as one argument.
func aclTokens(line string) []string {
	var out []string
	depth, start := 0, -1
	for i, ch := range line {
		switch {
		case ch == ' ' && depth == 0:
			if start >= 0 {
				out = append(out, line[start:i])
				start = -1
			}
			continue
		case ch == '(':
			depth++
		case ch == ')' && depth > 0:
			depth--
		}
		if start < 0 {
			start = i
		}
	}
	if start >= 0 {
		out = append(out, line[start:])
	}
	return out
}

// setUsers gives each user exactly its rules, as aclList returned them,
// creating users that are missing. Each change is atomic: a user is never
// seen without its password or permissions, and its connections stay
// open.
func setUsers(ctx context.Context, c *redis.Client, users map[string][]string) error {
	var errs []error
	for _, n := range slices.Sorted(maps.Keys(users)) {
		args := []any{"ACL", "SETUSER", n, "reset"}
		for _, rule := range users[n] {
			args = append(args, rule)
		}
		if err := c.Do(ctx, args...).Err(); err != nil {
			errs = append(errs, fmt.Errorf("ACL SETUSER %s: %w", n, err))
		}
	}
	return errors.Join(errs...)
}
