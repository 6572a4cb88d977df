package stampedeprom_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hotkv/stampede/cache"
	"github.com/hotkv/stampede/lock"
	"github.com/hotkv/stampede/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
)

// The rules and the dashboard shipped with the module; promtool tests the
// rules' values (scripts/promtool.sh), these tests what they name.
const (
	rulesFile     = "rules/stampede.rules.yml"
	dashboardFile = "dashboards/stampede.json"
)

// rule is a recording or alerting rule of rulesFile.
type rule struct {
	kind string // "record" or "alert"
	name string
	expr string
	line int
}

var (
	ruleRe = regexp.MustCompile(`^\s*- (record|alert):\s*(\S+)\s*$`)
	exprRe = regexp.MustCompile(`^(\s*)expr:\s*(.*?)\s*$`)
)

// readRules reads rulesFile line by line, with no YAML parser: a rule
// starts at "- record: name" or "- alert: name", and its expr is the rest
// of the "expr:" line or, after "expr: |" (or >), the lines indented
// deeper than that line.
func readRules(tb testing.TB) []rule {
	tb.Helper()
	data, err := os.ReadFile(rulesFile)
	if err != nil {
		tb.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var rules []rule
	for i := 0; i < len(lines); i++ {
		if m := ruleRe.FindStringSubmatch(lines[i]); m != nil {
			rules = append(rules, rule{kind: m[1], name: m[2], line: i + 1})
			continue
		}
		m := exprRe.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if len(rules) == 0 || rules[len(rules)-1].expr != "" {
			tb.Fatalf("%s:%d: an expr outside a rule", rulesFile, i+1)
		}
		expr := m[2]
		if strings.HasPrefix(expr, "|") || strings.HasPrefix(expr, ">") {
			var body []string
			for i+1 < len(lines) && (strings.TrimSpace(lines[i+1]) == "" || indent(lines[i+1]) > len(m[1])) {
				i++
				body = append(body, strings.TrimSpace(lines[i]))
			}
			expr = strings.TrimSpace(strings.Join(body, " "))
		} else if strings.HasPrefix(expr, `"`) || strings.HasPrefix(expr, "'") {
			tb.Fatalf("%s:%d: a quoted expr: write it plain or as a block (|)", rulesFile, i+1)
		}
		rules[len(rules)-1].expr = expr
	}
	if len(rules) == 0 {
		tb.Fatalf("%s: no rules", rulesFile)
	}
	for _, r := range rules {
		if r.expr == "" {
			tb.Fatalf("%s:%d: %s %s has no expr", rulesFile, r.line, r.kind, r.name)
		}
	}
	return rules
}

func indent(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// query is what the tests need of a PromQL expression: the metric names
// it selects and, by metric, the label names its matchers name, and the
// label names of its groupings (by, without, on, ...).
type query struct {
	metrics  []string
	matchers map[string][]string // by metric name
	grouping []string
}

var (
	stringRe   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	selectorRe = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^{}]*)\}`)
	matcherRe  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(?:=~|!~|!=|=)`)
	rangeRe    = regexp.MustCompile(`\[[^\]]*\]`)
	groupingRe = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	identRe    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*`)
	keywords   = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// parseQuery scans expr with regular expressions: enough for the rules
// and panels here, not a PromQL parser. A word followed by "(" is a
// function; the other words that are no keywords are metric names.
func parseQuery(expr string) query {
	q := query{matchers: map[string][]string{}}
	s := stringRe.ReplaceAllString(expr, `""`)
	for _, m := range selectorRe.FindAllStringSubmatch(s, -1) {
		for _, l := range matcherRe.FindAllStringSubmatch(m[2], -1) {
			q.matchers[m[1]] = append(q.matchers[m[1]], l[1])
		}
	}
	s = selectorRe.ReplaceAllString(s, " $1 ")
	s = rangeRe.ReplaceAllString(s, " ")
	for _, g := range groupingRe.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(g[1], ",") {
			if l = strings.TrimSpace(l); l != "" {
				q.grouping = append(q.grouping, l)
			}
		}
	}
	s = groupingRe.ReplaceAllString(s, " ")
	for _, loc := range identRe.FindAllStringIndex(s, -1) {
		word := s[loc[0]:loc[1]]
		if loc[0] > 0 && strings.ContainsAny(s[loc[0]-1:loc[0]], "0123456789.$") { // 1e3, 5m, $var
			continue
		}
		if strings.HasPrefix(strings.TrimLeft(s[loc[1]:], " \t"), "(") || keywords[strings.ToLower(word)] {
			continue
		}
		q.metrics = append(q.metrics, word)
	}
	return q
}

// recorded returns the recording rules by name, each with the labels its
// result keeps: those of the groupings of its expr, le aside. It fails tb
// unless each is named level:stampede_metric:operations with the labels
// kept as its level.
func recorded(tb testing.TB, rules []rule) map[string][]string {
	tb.Helper()
	names := regexp.MustCompile(`^[a-z_]+:stampede_[a-z0-9_]+:[a-z0-9_]+$`) // level:metric:operations
	rec := map[string][]string{}
	for _, r := range rules {
		if r.kind != "record" {
			continue
		}
		if !names.MatchString(r.name) {
			tb.Errorf("%s:%d: %s is not named level:stampede_metric:operations", rulesFile, r.line, r.name)
		}
		if _, dup := rec[r.name]; dup {
			tb.Errorf("%s:%d: %s recorded twice", rulesFile, r.line, r.name)
		}
		kept := slices.DeleteFunc(parseQuery(r.expr).grouping, func(l string) bool { return l == "le" })
		slices.Sort(kept)
		kept = slices.Compact(kept)
		// The level is the labels kept, joined by _ (none has a _ here).
		level := strings.Split(strings.Split(r.name, ":")[0], "_")
		slices.Sort(level)
		if !slices.Equal(level, kept) {
			tb.Errorf("%s:%d: %s keeps the labels %v: its level should name them", rulesFile, r.line, r.name, kept)
		}
		rec[r.name] = kept
	}
	return rec
}

// scrape returns what /metrics serves for Metrics with a cache (on a
// miniredis server), a lock client and a middleware observed, each with a
// few events, and the metric names and label names in it (a histogram's
// name with _bucket, _count and _sum, and le).
func scrape(t *testing.T) (text string, names, labels map[string]bool) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	m, reg := newMetrics(t, nil)
	c, err := cache.New(rdb, &cache.Options{Observer: m.CacheObserver("users")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := m.CacheStats("users", c); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 3 { // a miss and its load, then hits
		if _, err := cache.GetOrLoad(ctx, c, "user:42", func(context.Context) (string, error) { return "Ada", nil }); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cache.GetOrLoad(ctx, c, "user:43", func(context.Context) (string, error) { return "", errors.New("down") }); err == nil {
		t.Fatal("a failing loader: no error")
	}
	lo := m.LockObserver("jobs")
	lo(lock.Event{Kind: lock.EventObtained, Duration: time.Millisecond})
	lo(lock.Event{Kind: lock.EventNotObtained, Duration: 2 * time.Millisecond})
	mo := m.MiddlewareObserver("pages")
	mo(middleware.Event{Kind: middleware.EventHit, Route: "/users/{id}", Duration: time.Millisecond})
	mo(middleware.Event{Kind: middleware.EventBypass, Route: "/users/{id}", Reason: "authorization"})

	rec := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, err := io.ReadAll(rec.Result().Body)
	if err != nil || rec.Code != 200 || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/plain") {
		t.Fatalf("/metrics: %d %q %v", rec.Code, rec.Header().Get("Content-Type"), err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names, labels = map[string]bool{}, map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			names[mf.GetName()+"_bucket"], names[mf.GetName()+"_count"], names[mf.GetName()+"_sum"] = true, true, true
			labels["le"] = true
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				labels[lp.GetName()] = true
			}
		}
	}
	return string(body), names, labels
}

// Every metric and label the rules name is in a real scrape, and a
// recording rule reads only metrics and rules defined. With
// STAMPEDEPROM_SCRAPE set, the scrape is written to that file, for
// promtool check metrics (scripts/promtool.sh).
func TestRules_metrics(t *testing.T) {
	text, names, labels := scrape(t)
	if f := os.Getenv("STAMPEDEPROM_SCRAPE"); f != "" {
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []string{"stampede_cache_events_total", "stampede_cache_near_flushes_total", "stampede_lock_events_total", "stampede_middleware_duration_seconds_bucket"} {
		if !names[want] {
			t.Fatalf("the scrape has no %s: %v", want, names)
		}
	}
	rules := readRules(t)
	rec := recorded(t, rules)
	for _, r := range rules {
		q := parseQuery(r.expr)
		if len(q.metrics) == 0 {
			t.Errorf("%s:%d: %s %s selects no metric: %s", rulesFile, r.line, r.kind, r.name, r.expr)
		}
		for _, name := range q.metrics {
			_, isRule := rec[name]
			if !names[name] && !isRule {
				t.Errorf("%s:%d: %s %s reads %s, in neither a scrape nor a recording rule", rulesFile, r.line, r.kind, r.name, name)
			}
			if r.kind == "record" && isRule {
				t.Errorf("%s:%d: %s reads the recording rule %s: write its expr out", rulesFile, r.line, r.name, name)
			}
		}
		for name, ls := range q.matchers {
			for _, l := range ls {
				if kept, isRule := rec[name]; isRule && !slices.Contains(kept, l) || !isRule && !labels[l] {
					t.Errorf("%s:%d: %s %s matches the label %s, which %s has not", rulesFile, r.line, r.kind, r.name, l, name)
				}
			}
		}
		for _, l := range q.grouping {
			if !labels[l] {
				t.Errorf("%s:%d: %s %s groups by %s, no label of a scrape", rulesFile, r.line, r.kind, r.name, l)
			}
		}
	}
}

// dashboard is what the test reads of dashboardFile.
type dashboard struct {
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Type       string          `json:"type"`
			Name       string          `json:"name"`
			Query      json.RawMessage `json:"query"` // a string, or {"query": ...}
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		Expr         string      `json:"expr"`
		LegendFormat string      `json:"legendFormat"`
		Datasource   *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // of a collapsed row
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

var (
	labelValuesRe = regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)
	legendRe      = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
)

// The dashboard queries the recording rules only, through the datasource
// variable, filters and labels its legends by labels they keep, and has
// the cache, lock and route variables; every recording rule is on it or
// in an alert.
func TestRules_dashboard(t *testing.T) {
	rules := readRules(t)
	rec := recorded(t, rules)
	data, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	used := map[string]bool{}
	for _, r := range rules {
		if r.kind == "alert" {
			for _, name := range parseQuery(r.expr).metrics {
				used[name] = true
			}
		}
	}
	// check checks one expr of what; legend names labels of its result.
	check := func(what, expr, legend string) {
		t.Helper()
		q := parseQuery(expr)
		if len(q.metrics) == 0 {
			t.Errorf("%s: %q selects nothing", what, expr)
		}
		for _, name := range q.metrics {
			kept, ok := rec[name]
			if !ok {
				t.Errorf("%s: %q reads %s, no recording rule of %s", what, expr, name, rulesFile)
				continue
			}
			used[name] = true
			for _, l := range q.matchers[name] {
				if !slices.Contains(kept, l) {
					t.Errorf("%s: %q matches the label %s, which %s has not (%v)", what, expr, l, name, kept)
				}
			}
			for _, l := range legendRe.FindAllStringSubmatch(legend, -1) {
				if !slices.Contains(kept, l[1]) {
					t.Errorf("%s: legend %q names the label %s, which %s has not (%v)", what, legend, l[1], name, kept)
				}
			}
		}
	}

	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type != "query" {
			continue
		}
		var s string
		var o struct {
			Query string `json:"query"`
		}
		if json.Unmarshal(v.Query, &s) != nil {
			if err := json.Unmarshal(v.Query, &o); err != nil {
				t.Fatalf("variable %s: query %s: %v", v.Name, v.Query, err)
			}
			s = o.Query
		}
		m := labelValuesRe.FindStringSubmatch(s)
		if m == nil {
			t.Errorf("variable %s: query %q is no label_values(rule, label)", v.Name, s)
			continue
		}
		check("variable "+v.Name, m[1], "{{"+m[2]+"}}")
		if v.Datasource == nil || v.Datasource.UID != "${datasource}" {
			t.Errorf("variable %s: datasource %+v, want uid ${datasource}", v.Name, v.Datasource)
		}
	}
	for name, typ := range map[string]string{"datasource": "datasource", "cache": "query", "lock": "query", "route": "query"} {
		if vars[name] != typ {
			t.Errorf("variable %s: type %q, want %q", name, vars[name], typ)
		}
	}

	var walk func(ps []panel)
	n := 0
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			n++
			if len(p.Targets) == 0 {
				t.Errorf("panel %q: no targets", p.Title)
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: datasource %+v, want uid ${datasource}", p.Title, p.Datasource)
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && tg.Datasource.UID != "${datasource}" {
					t.Errorf("panel %q: target datasource %+v, want uid ${datasource}", p.Title, tg.Datasource)
				}
				check("panel "+p.Title, tg.Expr, tg.LegendFormat)
			}
		}
	}
	walk(d.Panels)
	if n == 0 {
		t.Fatalf("%s: no panels", dashboardFile)
	}
	for name := range rec {
		if !used[name] {
			t.Errorf("%s: %s is recorded, yet neither on the dashboard nor in an alert", rulesFile, name)
		}
	}
}

// The scanner finds what the tests rely on, so that a rule it misreads
// cannot pass unseen.
func TestRules_parseQuery(t *testing.T) {
	q := parseQuery(`histogram_quantile(0.99, sum by (cache, le) (rate(stampede_x_bucket{event!="a}b",tier=~"n"}[5m]))) / on (cache) group_left x:y:z{cache=~"$cache"} * 1e3 > bool 0.5 offset 5m`)
	if !slices.Equal(q.metrics, []string{"stampede_x_bucket", "x:y:z"}) {
		t.Errorf("metrics %v", q.metrics)
	}
	if !slices.Equal(q.grouping, []string{"cache", "le", "cache"}) {
		t.Errorf("grouping %v", q.grouping)
	}
	if !slices.Equal(q.matchers["stampede_x_bucket"], []string{"event", "tier"}) || !slices.Equal(q.matchers["x:y:z"], []string{"cache"}) {
		t.Errorf("matchers %v", q.matchers)
	}
}
