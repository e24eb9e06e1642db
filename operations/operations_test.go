package operations

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// alloyAlerts are the clustering alerts of Grafana Alloy's mixin; shoal's
// rules keep their names and meaning.
var alloyAlerts = []string{
	"ClusterNotConverging", "ClusterNodeCountMismatch", "ClusterNodeUnhealthy",
	"ClusterNodeNameConflict", "ClusterNodeStuckTerminating", "ClusterConfigurationDrift",
}

func TestRulesFileIsValid(t *testing.T) {
	groups, errs := rulefmt.Parse(Rules(), false, model.UTF8Validation, parser.NewParser(parser.Options{}), promslog.NewNopLogger())
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var names []string
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
			if r.Alert == "" {
				t.Errorf("group %s has a rule that is not an alert: %q", g.Name, r.Record)
			}
			if _, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr); err != nil {
				t.Errorf("%s: %v", r.Alert, err)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("%s needs a severity label and summary and description annotations", r.Alert)
			}
		}
	}
	for _, want := range append(slices.Clone(alloyAlerts),
		"ShoalTargetsOrphaned", "ShoalTargetsDuplicated", "ShoalLoadSkew",
		"ShoalRemoteWriteBehind", "ShoalWALCorruption", "ShoalSamplesDropped",
		"ShoalConfigReloadFailed", "ShoalWALUnwritable", "ShoalPeerDiscoveryFailing", "ShoalMonitorsWatchFailing") {
		if !slices.Contains(names, want) {
			t.Errorf("no alert %s", want)
		}
	}
}

// healthyCluster is three participants (n1..n3) of job "shoal" scraping 300
// targets (30 of which have an `up` series here) and sending everything, for an hour at a 1m resolution.
// Series are keyed by their selector so that a case can replace one.
func healthyCluster() map[string]string {
	s := map[string]string{}
	for i, n := range []string{"n1", "n2", "n3"} {
		l := fmt.Sprintf(`job="shoal", instance=%q`, n)
		s[`cluster_node_info{`+l+`, state="participant"}`] = "1x60"
		s[`cluster_node_peers{`+l+`, state="participant"}`] = "3x60"
		s[`cluster_node_gossip_health_score{`+l+`}`] = "0x60"
		s[`cluster_node_gossip_received_events_total{`+l+`, event="join"}`] = "2x60"
		s[`up{`+l+`}`] = "1x60"
		s[`shoal_config_hash{`+l+`, sha256="aaa"}`] = "1x60"
		s[`shoal_cluster_config_drift_peers{`+l+`}`] = "0x60"
		s[`shoal_config_last_reload_successful{`+l+`}`] = "1x60"
		s[`shoal_targets_owned{`+l+`, exported_job="demo"}`] = "100x60"
		s[`shoal_targets_discovered{`+l+`, exported_job="demo"}`] = "300x60"
		s[`shoal_targets_invalid{`+l+`, exported_job="demo"}`] = "0x60"
		s[`shoal_ring_ownership_ratio{`+l+`}`] = fmt.Sprintf("%.3fx60", []float64{0.31, 0.35, 0.34}[i])
		s[`shoal_wal_samples_appended_total{`+l+`, type="float"}`] = "0+600x60" // 10/s
		s[`shoal_wal_write_failures_total{`+l+`}`] = "0x60"
		s[`shoal_wal_writable{`+l+`}`] = "1x60"
		s[`shoal_cluster_discovery_errors_total{`+l+`, method="dns"}`] = "0x60"
		s[`shoal_monitors_watch_errors_total{`+l+`, kind="ScrapeConfig"}`] = "0x60"
		s[`shoal_wal_segments_dropped_unsent_total{`+l+`}`] = "0x60"
		s[`shoal_wal_corruptions_repaired_total{`+l+`}`] = "0x60"
		s[`shoal_remotewrite_wal_read_errors_total{`+l+`, remote_name="r"}`] = "0x60"
		s[`prometheus_remote_storage_highest_timestamp_in_seconds{`+l+`}`] = "0+60x60"
		s[`prometheus_remote_storage_queue_highest_sent_timestamp_seconds{`+l+`, remote_name="r", url="u"}`] = "0+60x60"
		s[`prometheus_remote_storage_samples_failed_total{`+l+`, remote_name="r", url="u"}`] = "0x60"
		s[`prometheus_remote_storage_samples_dropped_total{`+l+`, remote_name="r", url="u", reason="dropped_series"}`] = "0+60x60"
	}
	for i := range 30 {
		s[fmt.Sprintf(`up{job="demo", instance="t%d"}`, i)] = "1x60"
	}
	return s
}

const (
	nodeDefaults = `job="shoal", instance="n1"`
	n2           = `job="shoal", instance="n2"`
	n3           = `job="shoal", instance="n3"`
)

// Each alert fires on synthetic series that show its problem, and no other
// alert fires than the ones the problem explains.
func TestAlertsFire(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(s map[string]string)
		at     time.Duration
		want   []string
	}{
		{"healthy", func(map[string]string) {}, 59 * time.Minute, nil},
		{"node sees fewer peers", func(s map[string]string) {
			s[`cluster_node_peers{`+n3+`, state="participant"}`] = "2x60"
		}, 30 * time.Minute, []string{"ClusterNodeCountMismatch", "ClusterNotConverging"}},
		{"node down", func(s map[string]string) {
			for k := range s {
				if strings.Contains(k, n3) && !strings.HasPrefix(k, "up{") {
					delete(s, k)
				}
			}
			s[`up{`+n3+`}`] = "0x60"
			for _, n := range []string{nodeDefaults, n2} {
				s[`cluster_node_peers{`+n+`, state="participant"}`] = "2x60"
				s[`shoal_targets_owned{`+n+`, exported_job="demo"}`] = "150x60"
				s[`shoal_ring_ownership_ratio{`+n+`}`] = "0.5x60"
			}
		}, 30 * time.Minute, []string{"ClusterNodeCountMismatch"}},
		{"gossip health", func(s map[string]string) {
			s[`cluster_node_gossip_health_score{`+n2+`}`] = "2x60"
		}, 30 * time.Minute, []string{"ClusterNodeUnhealthy"}},
		{"name conflict", func(s map[string]string) {
			s[`cluster_node_gossip_received_events_total{`+nodeDefaults+`, event="node_conflict"}`] = "0+1x60"
		}, 30 * time.Minute, []string{"ClusterNodeNameConflict"}},
		{"terminating for ever", func(s map[string]string) {
			for _, n := range []string{nodeDefaults, n2, n3} {
				s[`cluster_node_peers{`+n+`, state="participant"}`] = "2x60"
				s[`cluster_node_peers{`+n+`, state="terminating"}`] = "1x60"
			}
		}, 30 * time.Minute, []string{"ClusterNodeStuckTerminating"}},
		{"configuration drift", func(s map[string]string) {
			delete(s, `shoal_config_hash{`+n3+`, sha256="aaa"}`)
			s[`shoal_config_hash{`+n3+`, sha256="bbb"}`] = "1x60"
		}, 30 * time.Minute, []string{"ClusterConfigurationDrift"}},
		{"one replica keeps the old scrape configuration (gossip view)", func(s map[string]string) {
			// n3 refused its new file: its peers see it drift, it sees both.
			s[`shoal_cluster_config_drift_peers{`+nodeDefaults+`}`] = "0x10 1x50"
			s[`shoal_cluster_config_drift_peers{`+n2+`}`] = "0x10 1x50"
			s[`shoal_cluster_config_drift_peers{`+n3+`}`] = "0x10 2x50"
		}, 30 * time.Minute, []string{"ClusterConfigurationDrift"}},
		{"a rollout drifts briefly", func(s map[string]string) {
			s[`shoal_cluster_config_drift_peers{`+nodeDefaults+`}`] = "0x10 1x2 0x48"
			s[`shoal_cluster_config_drift_peers{`+n2+`}`] = "0x10 2x1 1x1 0x48"
		}, 30 * time.Minute, nil},
		{"orphaned target", func(s map[string]string) {
			// Nobody scrapes t7 after 10m, and nobody wrote staleness markers.
			s[`up{job="demo", instance="t7"}`] = "1x10"
		}, 20 * time.Minute, []string{"ShoalTargetsOrphaned"}},
		{"removed target is not an orphan", func(s map[string]string) {
			// A target that left discovery ends with a staleness marker.
			s[`up{job="demo", instance="t7"}`] = "1x10 stale"
		}, 20 * time.Minute, nil},
		{"duplicated targets", func(s map[string]string) {
			s[`shoal_targets_owned{`+nodeDefaults+`, exported_job="demo"}`] = "200x60"
		}, 30 * time.Minute, []string{"ShoalTargetsDuplicated"}},
		{"load skew", func(s map[string]string) {
			s[`shoal_wal_samples_appended_total{`+nodeDefaults+`, type="float"}`] = "0+1800x60"
		}, 55 * time.Minute, []string{"ShoalLoadSkew"}},
		{"load skew with few targets is luck", func(s map[string]string) {
			s[`shoal_wal_samples_appended_total{`+nodeDefaults+`, type="float"}`] = "0+1800x60"
			for _, n := range []string{nodeDefaults, n2, n3} {
				s[`shoal_targets_owned{`+n+`, exported_job="demo"}`] = "10x60"
				s[`shoal_targets_discovered{`+n+`, exported_job="demo"}`] = "30x60"
			}
		}, 55 * time.Minute, nil},
		{"remote write behind", func(s map[string]string) {
			s[`prometheus_remote_storage_queue_highest_sent_timestamp_seconds{`+n2+`, remote_name="r", url="u"}`] = "0+60x10 600x50"
		}, 50 * time.Minute, []string{"ShoalRemoteWriteBehind"}},
		{"remote write paused by authentication", func(s map[string]string) {
			s[`shoal_remotewrite_queue_paused{`+n2+`, remote_name="r", reason="auth"}`] = "0x10 1x50"
		}, 30 * time.Minute, []string{"ShoalRemoteWritePaused"}},
		{"remote write paused briefly", func(s map[string]string) {
			// Credentials rotated within minutes: no page.
			s[`shoal_remotewrite_queue_paused{`+n2+`, remote_name="r", reason="auth"}`] = "0x10 1x5 0x45"
		}, 50 * time.Minute, nil},
		{"remote write not paused", func(s map[string]string) {
			s[`shoal_remotewrite_queue_paused{`+n2+`, remote_name="r", reason="auth"}`] = "0x60"
			s[`shoal_remotewrite_queue_paused{`+n2+`, remote_name="r", reason="not_found"}`] = "0x60"
		}, 50 * time.Minute, nil},
		{"samples refused by the remote end", func(s map[string]string) {
			s[`prometheus_remote_storage_samples_failed_total{`+n2+`, remote_name="r", url="u"}`] = "0+60x60"
		}, 30 * time.Minute, []string{"ShoalSamplesDropped"}},
		{"samples lost between WAL and queue", func(s map[string]string) {
			s[`prometheus_remote_storage_samples_dropped_total{`+n2+`, remote_name="r", url="u", reason="unintentionally_dropped_series"}`] = "0+6x60"
		}, 30 * time.Minute, []string{"ShoalSamplesDropped"}},
		{"WAL write failures", func(s map[string]string) {
			s[`shoal_wal_write_failures_total{`+n2+`}`] = "0+1x60"
		}, 30 * time.Minute, []string{"ShoalSamplesDropped"}},
		{"WAL segments dropped unsent", func(s map[string]string) {
			s[`shoal_wal_segments_dropped_unsent_total{`+n2+`}`] = "0x20 1x40"
		}, 30 * time.Minute, []string{"ShoalWALSegmentsDroppedUnsent"}},
		{"WAL corruption repaired", func(s map[string]string) {
			s[`shoal_wal_corruptions_repaired_total{`+n2+`}`] = "0x20 1x40"
		}, 30 * time.Minute, []string{"ShoalWALCorruption"}},
		{"corrupt WAL record read by a queue", func(s map[string]string) {
			s[`shoal_remotewrite_wal_read_errors_total{`+n2+`, remote_name="r"}`] = "0x20 3x40"
		}, 30 * time.Minute, []string{"ShoalWALCorruption"}},
		{"configuration refused", func(s map[string]string) {
			s[`shoal_config_last_reload_successful{`+n2+`}`] = "0x60"
		}, 30 * time.Minute, []string{"ShoalConfigReloadFailed"}},
		{"configuration refused once, then accepted", func(s map[string]string) {
			s[`shoal_config_last_reload_successful{`+n2+`}`] = "1x10 0x5 1x45"
		}, 30 * time.Minute, nil},
		{"WAL unwritable", func(s map[string]string) {
			s[`shoal_wal_writable{`+n2+`}`] = "1x10 0x50"
		}, 30 * time.Minute, []string{"ShoalWALUnwritable"}},
		{"WAL unwritable until the next reopen", func(s map[string]string) {
			s[`shoal_wal_writable{`+n2+`}`] = "1x10 0x2 1x48"
		}, 30 * time.Minute, nil},
		{"peer discovery failing", func(s map[string]string) {
			s[`shoal_cluster_discovery_errors_total{`+n2+`, method="dns"}`] = "0x10 0+1x50"
		}, 40 * time.Minute, []string{"ShoalPeerDiscoveryFailing"}},
		{"one failed peer look-up", func(s map[string]string) {
			s[`shoal_cluster_discovery_errors_total{`+n2+`, method="dns"}`] = "0x10 1x50"
		}, 30 * time.Minute, nil},
		{"a monitor kind cannot be listed", func(s map[string]string) {
			s[`shoal_monitors_watch_errors_total{`+n2+`, kind="ScrapeConfig"}`] = "0x10 0+2x50"
		}, 40 * time.Minute, []string{"ShoalMonitorsWatchFailing"}},
		{"one failed watch of monitors", func(s map[string]string) {
			s[`shoal_monitors_watch_errors_total{`+n2+`, kind="ScrapeConfig"}`] = "0x10 1x50"
		}, 30 * time.Minute, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := healthyCluster()
			tc.change(s)
			got := firingAt(t, s, tc.at)
			if !slices.Equal(got, tc.want) {
				t.Errorf("firing at %v: %v, want %v", tc.at, got, tc.want)
			}
		})
	}
}

// firingAt evaluates the rules every minute from 0 to at, as promtool's rule
// tests do, and returns the names of the alerts firing at the end.
func firingAt(t *testing.T, series map[string]string, at time.Duration) []string {
	t.Helper()
	var load strings.Builder
	load.WriteString("load 1m\n")
	for _, k := range slices.Sorted(maps.Keys(series)) {
		fmt.Fprintf(&load, "  %s %s\n", k, series[k])
	}
	suite, err := promqltest.NewLazyLoader(load.String(), promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = suite.Close() })
	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
	})
	groups, errs := m.LoadGroups(time.Minute, labels.EmptyLabels(), "", nil, false, RulesFile)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true)
			}
		}
	}
	start := time.Unix(0, 0).UTC()
	for ts := start; !ts.After(start.Add(at)); ts = ts.Add(time.Minute) {
		suite.WithSamplesTill(ts, func(err error) {
			if err != nil {
				t.Fatal(err)
			}
			for _, g := range groups {
				g.Eval(suite.Context(), ts)
				for _, r := range g.Rules() {
					if r.LastError() != nil {
						t.Fatalf("rule %s at %v: %v", r.Name(), ts.Sub(start), r.LastError())
					}
				}
			}
		})
	}
	var firing []string
	for _, g := range groups {
		for _, r := range g.Rules() {
			ar, ok := r.(*rules.AlertingRule)
			if !ok {
				continue
			}
			for _, a := range ar.ActiveAlerts() {
				if a.State == rules.StateFiring && !slices.Contains(firing, ar.Name()) {
					firing = append(firing, ar.Name())
				}
			}
		}
	}
	slices.Sort(firing)
	return firing
}

// Dashboards are valid JSON, every panel has a query, and every query parses
// once Grafana's variables are filled in.
func TestDashboardsParse(t *testing.T) {
	ds, err := Dashboards()
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 2 {
		t.Fatalf("want the cluster overview and node detail dashboards, got %d", len(ds))
	}
	vars := map[string]string{"job": ".+", "instance": ".+", "__rate_interval": "1m"}
	uids := map[string]bool{}
	for _, d := range ds {
		if d.UID == "" || uids[d.UID] {
			t.Errorf("%s: uid %q missing or not unique", d.File, d.UID)
		}
		uids[d.UID] = true
		panels := d.QueryPanels()
		if len(panels) < 10 {
			t.Errorf("%s has only %d panels", d.File, len(panels))
		}
		for _, p := range panels {
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", d.File, p.Title)
			}
			for _, q := range p.Targets {
				expr := Expand(q.Expr, vars)
				if strings.Contains(expr, "$") {
					t.Errorf("%s: panel %q: unknown variable in %s", d.File, p.Title, q.Expr)
				}
				names, err := MetricNames(expr)
				if err != nil {
					t.Errorf("%s: panel %q: %v", d.File, p.Title, err)
				}
				if len(names) == 0 {
					t.Errorf("%s: panel %q: no metric in %s", d.File, p.Title, q.Expr)
				}
			}
		}
	}
}
