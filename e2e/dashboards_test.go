package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/shoal-dev/shoal/operations"
)

// dashScrapeInterval is the scrape interval of TestDashboardsAndAlerts.
// Longer than the other tests' so that 60 targets and three agents stay
// light on a small machine.
const dashScrapeInterval = 2 * time.Second

// TestDashboardsAndAlerts runs three clustered agents that scrape 60 targets
// and each other into the real TSDB receiver, then evaluates every dashboard
// query and every alert expression there: each panel returns data and no
// alert expression is true on the healthy cluster. One agent is then killed:
// the node-count mismatch turns true, and the targets it scraped show up as
// orphans until its peers take them over.
func TestDashboardsAndAlerts(t *testing.T) {
	needBinary(t)
	tr := startReceiver(t)
	targets := startTargets(t, 60, 200)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "shoal.yml")
	nodes := newClusterAgents(t, 3, cfg, 3)
	// The agents start with no targets and get them by a reload once all
	// three are participants. While the ring forms at startup a target can be
	// scraped by two nodes at once (targets a node sees first skip the
	// hand-off delay), the receiver refuses the overlap as out of order and
	// ShoalSamplesDropped rightly fires; that is a start-up hand-off problem,
	// not what this test is about.
	writeDashboardConfig(t, cfg, nil, nil, tr.writeURL())
	startCluster(t, nodes)
	for _, a := range nodes {
		eventually(t, convergeTimeout, a.spec.name+" sees three participants", func() error {
			v, err := a.metricValue("cluster_node_peers", map[string]string{"state": "participant"})
			if err == nil && v != 3 {
				err = fmt.Errorf("%v participants", v)
			}
			return err
		})
	}
	writeDashboardConfig(t, cfg, nodes, targets, tr.writeURL())
	for _, a := range nodes {
		resp, err := httpClient.Post(a.url("/-/reload"), "", nil)
		if err != nil {
			fatal(t, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fatalf(t, "%s: reload: %s", a.spec.name, resp.Status)
		}
	}

	// A short receiver outage, retried: the retry counters by reason exist
	// from then on (nothing is lost, so no alert may fire for it).
	tr.unavailable.Store(true)
	eventually(t, convergeTimeout, "a write answered 503", func() error {
		if tr.refused.Load() == 0 {
			return errors.New("no write refused yet")
		}
		return nil
	})
	tr.unavailable.Store(false)

	// Every metric name the dashboards and rules use is one shoal exports.
	dashboards, err := operations.Dashboards()
	if err != nil {
		fatal(t, err)
	}
	groups, errs := rulefmt.Parse(operations.Rules(), false, model.UTF8Validation, parser.NewParser(parser.Options{}), promslog.NewNopLogger())
	if len(errs) > 0 {
		fatal(t, errs)
	}
	vars := map[string]string{"job": ".+", "instance": ".+", "__rate_interval": model.Duration(5 * dashScrapeInterval).String()}
	used := map[string]string{"shoal_build_info": "the dashboards' variables"}
	for _, d := range dashboards {
		for _, p := range d.QueryPanels() {
			for _, q := range p.Targets {
				names, err := operations.MetricNames(operations.Expand(q.Expr, vars))
				if err != nil {
					fatalf(t, "%s %q: %v", d.File, p.Title, err)
				}
				for _, n := range names {
					used[n] = fmt.Sprintf("%s panel %q", d.File, p.Title)
				}
			}
		}
	}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			names, err := operations.MetricNames(r.Expr)
			if err != nil {
				fatalf(t, "%s: %v", r.Alert, err)
			}
			for _, n := range names {
				used[n] = "alert " + r.Alert
			}
		}
	}
	// Some families appear only once something happened (a second scrape, a
	// sample sent or dropped): wait for them, then name what is missing.
	var missing []string
	_ = poll(convergeTimeout, func() error {
		exported, err := exportedNames(nodes)
		if err != nil {
			return err
		}
		missing = missing[:0]
		for name, where := range used {
			if !exported[name] && !refusalOnly(t, name) && !monitorsOnly(t, name) {
				missing = append(missing, fmt.Sprintf("%s uses %s", where, name))
			}
		}
		if len(missing) > 0 {
			return errors.New("missing")
		}
		return nil
	})
	for _, m := range missing {
		errorf(t, "%s, which shoal does not export", m)
	}

	// Every panel returns data from the receiver.
	eventually(t, convergeTimeout, "every dashboard panel returns data", func() error {
		var empty []string
		for _, d := range dashboards {
			for _, p := range d.QueryPanels() {
				hasData := false
				for _, q := range p.Targets {
					n, err := queryReceiver(tr, operations.Expand(q.Expr, vars), time.Now())
					if err != nil {
						fatalf(t, "%s %q: %v", d.File, p.Title, err)
					}
					hasData = hasData || n > 0
				}
				if !hasData {
					empty = append(empty, d.File+": "+p.Title)
				}
			}
		}
		if len(empty) > 0 {
			return fmt.Errorf("panels without data: %s", strings.Join(empty, "; "))
		}
		return nil
	})

	// No alert expression is true on the healthy cluster. Right after start
	// some are for a moment (`up` of a node not scraped yet, a queue that
	// has not sent yet), which the rules' `for:` durations absorb; so wait
	// until none is, then require that over several evaluations.
	alerts := map[string]string{}
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r.Expr
		}
	}
	eventually(t, convergeTimeout, "no alert expression true on the healthy cluster", func() error {
		for name, expr := range alerts {
			n, err := queryReceiver(tr, expr, time.Now())
			if err != nil {
				return fmt.Errorf("%s: %v", name, err)
			}
			if n > 0 {
				return fmt.Errorf("alert %s is true: %s", name, expr)
			}
		}
		return nil
	})
	for range 3 {
		for name, expr := range alerts {
			n, err := queryReceiver(tr, expr, time.Now())
			if err != nil {
				fatalf(t, "%s: %v", name, err)
			}
			if n > 0 {
				r, _ := receiverAPI(tr, "/api/v1/query", url.Values{"query": {expr}})
				errorf(t, "alert %s is true on a healthy cluster: %s\n%s", name, expr, r.Data.Result)
			}
		}
		time.Sleep(dashScrapeInterval)
	}
	if t.Failed() {
		return
	}

	// The orphan rule's threshold is 120s, four intervals at the chart's
	// 30s default; scaled to this test's interval it is three intervals.
	orphanExpr, ok := strings.CutSuffix(strings.TrimSpace(alerts["ShoalTargetsOrphaned"]), "> 120")
	if !ok {
		fatalf(t, "ShoalTargetsOrphaned is no longer `... > 120`: %s", alerts["ShoalTargetsOrphaned"])
	}
	orphanExpr += "> " + strconv.Itoa(int(3*dashScrapeInterval/time.Second))

	victim := nodes[2]
	owned, err := victim.activeTargets()
	if err != nil {
		fatal(t, err)
	}
	if len(owned) == 0 {
		fatalf(t, "%s scrapes nothing; nothing to orphan", victim.spec.name)
	}
	before := time.Now()
	victim.kill()
	killed := time.Now()
	survivors := nodes[:2]

	eventually(t, convergeTimeout, "ClusterNodeCountMismatch true after a node was killed", func() error {
		n, err := queryReceiver(tr, alerts["ClusterNodeCountMismatch"], time.Now())
		if err != nil {
			return err
		}
		if n != len(survivors) {
			return fmt.Errorf("%d series, want one per surviving node (%d)", n, len(survivors))
		}
		return nil
	})
	t.Logf("count mismatch seen %v after the kill", time.Since(killed).Round(100*time.Millisecond))

	// The survivors take the victim's targets over.
	eventually(t, convergeTimeout, "survivors scrape every target", func() error {
		seen := map[string]bool{}
		for _, a := range survivors {
			active, err := a.activeTargets()
			if err != nil {
				return err
			}
			for inst := range active {
				seen[inst] = true
			}
		}
		for inst := range owned {
			if !seen[inst] {
				return fmt.Errorf("%s not taken over yet", inst)
			}
		}
		return nil
	})
	resumed := time.Now()
	waitReceiverCaughtUp(t, tr, targets, resumed.Add(dashScrapeInterval))

	// Between the kill and the take-over, the victim's targets were orphans,
	// and only those.
	orphans, err := queryRangeInstances(tr, orphanExpr, killed, resumed, 250*time.Millisecond)
	if err != nil {
		fatal(t, err)
	}
	if len(orphans) == 0 {
		errorf(t, "no orphan seen between the kill and the take-over (%v)", resumed.Sub(killed).Round(100*time.Millisecond))
	}
	for _, inst := range orphans {
		if _, ok := owned[inst]; !ok {
			errorf(t, "%s was an orphan, but %s did not scrape it", inst, victim.spec.name)
		}
	}
	t.Logf("%d of %s's %d targets were orphans for a while; take-over after %v", len(orphans), victim.spec.name, len(owned), resumed.Sub(killed).Round(100*time.Millisecond))
	// Before the kill there were none, at the same threshold.
	if early, err := queryRangeInstances(tr, orphanExpr, before.Add(-20*time.Second), before, 250*time.Millisecond); err != nil || len(early) > 0 {
		errorf(t, "orphans before the kill: %v (%v)", early, err)
	}
	// And once the survivors scrape them, nobody is an orphan any more.
	if n, err := queryReceiver(tr, orphanExpr, time.Now()); err != nil || n > 0 {
		errorf(t, "orphans after the take-over: %d (%v)", n, err)
	}
}

func writeDashboardConfig(t *testing.T, path string, nodes []*agent, targets []*target, writeURL string) {
	t.Helper()
	var agents []string
	for _, a := range nodes {
		agents = append(agents, strconv.Quote(a.webAddr))
	}
	var demo []string
	for _, tg := range targetAddrs(targets) {
		demo = append(demo, strconv.Quote(tg))
	}
	iv := model.Duration(dashScrapeInterval)
	jobs := "scrape_configs: []\n"
	if len(nodes) > 0 {
		jobs = fmt.Sprintf(`scrape_configs:
  - job_name: shoal
    static_configs: [{targets: [%s]}]
  - job_name: demo
    static_configs: [{targets: [%s]}]
`, strings.Join(agents, ", "), strings.Join(demo, ", "))
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
%sremote_write:
  - url: %q
    queue_config: {batch_send_deadline: %s, min_backoff: 50ms, max_backoff: 500ms}
    # One series dropped on purpose, so that the dropped-by-reason series exist.
    write_relabel_configs:
      - source_labels: [__name__, series]
        regex: e2e_load;0
        action: drop
`, iv, iv, jobs, writeURL, model.Duration(batchSendDeadline))
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		fatal(t, err)
	}
}

// refusalOnly reports whether name is exported only once a receiver refused
// data as bad, which a healthy cluster never sees: such a name is checked to
// be registered by the remotewrite package instead.
func refusalOnly(t *testing.T, name string) bool {
	if name != "shoal_remotewrite_samples_dropped_total" {
		return false
	}
	src, err := os.ReadFile("../remotewrite/metrics.go")
	if err != nil {
		fatal(t, err)
	}
	return strings.Contains(string(src), `Name: "`+name+`"`)
}

// monitorsOnly says whether name is a family of the monitor watcher, which
// exists only with --kubernetes.monitors (these agents run without it).
func monitorsOnly(t *testing.T, name string) bool {
	if !strings.HasPrefix(name, "shoal_monitors_") {
		return false
	}
	src, err := os.ReadFile("../monitors/watch.go")
	if err != nil {
		fatal(t, err)
	}
	return strings.Contains(string(src), `Name: "`+name+`"`)
}

// exportedNames returns the names the live agents export on /metrics
// (histogram and summary series names included), and `up`.
func exportedNames(nodes []*agent) (map[string]bool, error) {
	names := map[string]bool{"up": true} // written by the scrape itself
	for _, a := range nodes {
		mfs, err := a.metrics()
		if err != nil {
			return nil, err
		}
		for n, mf := range mfs {
			names[n] = true
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
			case dto.MetricType_SUMMARY:
				names[n+"_sum"], names[n+"_count"] = true, true
			}
		}
	}
	return names, nil
}

type queryResponse struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Data   struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	} `json:"data"`
}

func receiverAPI(tr *testReceiver, path string, params url.Values) (queryResponse, error) {
	var r queryResponse
	resp, err := httpClient.PostForm(tr.srv.URL+path, params)
	if err != nil {
		return r, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return r, fmt.Errorf("%s: %s: %w", path, body, err)
	}
	if resp.StatusCode != http.StatusOK || r.Status != "success" {
		return r, fmt.Errorf("%s %q: %s: %s", path, params.Get("query"), resp.Status, r.Error)
	}
	return r, nil
}

// queryReceiver evaluates expr at ts and returns how many series (or 1 for
// a scalar) it returned.
func queryReceiver(tr *testReceiver, expr string, ts time.Time) (int, error) {
	r, err := receiverAPI(tr, "/api/v1/query", url.Values{
		"query": {expr}, "time": {strconv.FormatFloat(float64(ts.UnixMilli())/1000, 'f', 3, 64)},
	})
	if err != nil {
		return 0, err
	}
	if r.Data.ResultType == "scalar" || r.Data.ResultType == "string" {
		return 1, nil
	}
	var series []json.RawMessage
	if err := json.Unmarshal(r.Data.Result, &series); err != nil {
		return 0, err
	}
	return len(series), nil
}

// queryRangeInstances evaluates expr over [start, end] and returns the
// instance labels of every series that was in the result at some step.
func queryRangeInstances(tr *testReceiver, expr string, start, end time.Time, step time.Duration) ([]string, error) {
	f := func(t time.Time) string { return strconv.FormatFloat(float64(t.UnixMilli())/1000, 'f', 3, 64) }
	r, err := receiverAPI(tr, "/api/v1/query_range", url.Values{
		"query": {expr}, "start": {f(start)}, "end": {f(end)}, "step": {strconv.FormatFloat(step.Seconds(), 'f', 3, 64)},
	})
	if err != nil {
		return nil, err
	}
	var series []struct {
		Metric map[string]string `json:"metric"`
	}
	if err := json.Unmarshal(r.Data.Result, &series); err != nil {
		return nil, err
	}
	var out []string
	for _, s := range series {
		if !slices.Contains(out, s.Metric["instance"]) {
			out = append(out, s.Metric["instance"])
		}
	}
	slices.Sort(out)
	return out, nil
}
