package scrape

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/shoal-dev/shoal/ring"
)

func TestTargetKey(t *testing.T) {
	cfg := loadConfig(t, `
scrape_configs:
  - job_name: k8s
    params:
      module: [http_2xx]
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
      - source_labels: [__meta_kubernetes_pod_annotation_probe_target]
        target_label: __param_target
`)
	sc, _ := cfg.GetScrapeConfigs()
	job := sc[0]
	base := model.LabelSet{
		model.AddressLabel:                                 "10.1.2.3:8080",
		"__meta_kubernetes_pod_name":                       "api-0",
		"__meta_kubernetes_pod_annotation_probe_target":    "example.org",
		"__meta_kubernetes_pod_annotation_deploy_revision": "41",
	}
	with := func(k, v string) model.LabelSet {
		ls := base.Clone()
		ls[model.LabelName(k)] = model.LabelValue(v)
		return ls
	}
	key0, url0, final0, err := KeyFor(nil, job, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := "http://10.1.2.3:8080/metrics?module=http_2xx&target=example.org"; url0 != want {
		t.Fatalf("scrape URL %q, want %q", url0, want)
	}
	if final0.Get("pod") != "api-0" {
		t.Fatalf("final labels %v lack pod", final0)
	}
	// The key is exactly what tools compute from a promscrape.Target.
	if k := TargetKey("k8s", promscrape.NewTarget(final0, job, base, nil).URL()); k != key0 {
		t.Fatalf("TargetKey=%x, KeyFor=%x", k, key0)
	}

	for _, tc := range []struct {
		name    string
		ls      model.LabelSet
		group   model.LabelSet
		sameKey bool
	}{
		{"volatile annotation", with("__meta_kubernetes_pod_annotation_deploy_revision", "42"), nil, true},
		{"new meta label", with("__meta_kubernetes_pod_ready", "false"), nil, true},
		{"pod label reaches labels, not URL", with("__meta_kubernetes_pod_name", "api-0-renamed"), nil, true},
		{"group label", base, model.LabelSet{"zone": "b"}, true},
		{"address", with(model.AddressLabel, "10.1.2.4:8080"), nil, false},
		{"param via relabelling", with("__meta_kubernetes_pod_annotation_probe_target", "example.com"), nil, false},
		{"metrics path", with(model.MetricsPathLabel, "/other"), nil, false},
		{"scheme", with(model.SchemeLabel, "https"), nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, _, _, err := KeyFor(nil, job, tc.ls, tc.group)
			if err != nil {
				t.Fatal(err)
			}
			if (k == key0) != tc.sameKey {
				t.Errorf("key changed=%v, want changed=%v", k != key0, !tc.sameKey)
			}
		})
	}
	if TargetKeyString("a", "http://x/metrics") == TargetKeyString("b", "http://x/metrics") {
		t.Error("the job must be part of the key")
	}
	if TargetKeyString("ab", "c") == TargetKeyString("a", "bc") {
		t.Error("job and URL must be separated")
	}
}

func TestRelabelDroppedNeverOwned(t *testing.T) {
	cfg := loadConfig(t, twoJobs)
	for _, tc := range []struct {
		name string
		ring func(f *Filter)
	}{
		{"clustering disabled", func(*Filter) {}},
		{"single node ring", func(f *Filter) { f.SetRing(ring.New([]string{"a"}, 0), "a", 1, true) }},
		{"replication covers all", func(f *Filter) { f.SetRing(ring.New([]string{"a", "b"}, 0), "a", 2, true) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startFilter(t, FilterOptions{RingCoalesce: -1}, nil, cfg)
			tc.ring(h.f)
			ts := discovery(20, "app")
			// Three of the app targets are dropped by relabelling, one is
			// invalid (no address).
			for _, i := range []int{0, 5, 13} {
				ts["app"][i/10].Targets[i%10]["__meta_keep"] = "no"
			}
			ts["app"][1].Targets[9] = model.LabelSet{"__meta_pod": "no-address"}
			h.send(t, ts)
			o := h.waitOutput(t, 5*time.Second, "16 owned targets", func(o tsets) bool { return count(o) == 16 })
			for _, a := range addresses(o)["app"] {
				if a == "10.0.0.0:9100" || a == "10.0.0.5:9100" || a == "10.0.0.13:9100" {
					t.Errorf("relabel-dropped target %s passed on", a)
				}
			}
			reasons := map[string]int{}
			for _, ti := range h.f.Targets() {
				if ti.Owned {
					if ti.DropReason != "" || ti.Key == 0 || ti.ScrapeURL == "" || ti.Labels.IsEmpty() {
						t.Errorf("owned target with incomplete info: %+v", ti)
					}
					continue
				}
				reason := ti.DropReason
				if strings.HasPrefix(reason, reasonInvalidPrefix) {
					reason = reasonInvalidPrefix
				}
				reasons[reason]++
				if ti.Key != 0 || len(ti.Owners) != 0 || ti.DiscoveredLabels.Get("__meta_pod") == "" {
					t.Errorf("dropped target has a key or owners, or lost its discovered labels: %+v", ti)
				}
			}
			if reasons[ReasonRelabelled] != 3 || reasons[reasonInvalidPrefix] != 1 || len(reasons) != 2 {
				t.Errorf("drop reasons %v, want 3 relabelled away and 1 invalid", reasons)
			}
			if got := testutil.ToFloat64(h.f.metrics.invalid.WithLabelValues("app")); got != 1 {
				t.Errorf("shoal_targets_invalid{job=app}=%v, want 1", got)
			}
		})
	}
}

func TestVolatileLabelsKeepOwner(t *testing.T) {
	cfg := loadConfig(t, twoJobs)
	reg := prometheus.NewRegistry()
	f := newFilter(t, FilterOptions{RingCoalesce: -1}, nil, promslog.NewNopLogger(), reg)
	if err := f.ApplyConfig(cfg); err != nil {
		t.Fatal(err)
	}
	f.SetRing(ring.New([]string{"a", "b", "c"}, 0), "a", 1, true)
	ts := discovery(300, "node")
	f.merge(ts)
	before, _, _ := f.refilter(time.Now())
	infoBefore := f.Targets()

	// Every target gets a new annotation value and a new pod name.
	changed := discovery(300, "node")
	for _, g := range changed["node"] {
		for _, tl := range g.Targets {
			tl["__meta_kubernetes_pod_annotation_checksum"] = "deadbeef"
			tl["__meta_pod"] += "-restarted"
		}
	}
	f.merge(changed)
	after, _, _ := f.refilter(time.Now())
	infoAfter := f.Targets()

	if !slices.Equal(addresses(before)["node"], addresses(after)["node"]) || count(before) == 0 {
		t.Fatalf("owned set changed with volatile labels: %d -> %d", count(before), count(after))
	}
	for i := range infoBefore {
		if infoBefore[i].Key != infoAfter[i].Key || !slices.Equal(infoBefore[i].Owners, infoAfter[i].Owners) {
			t.Fatalf("target %s: key/owners changed: %x %v -> %x %v", infoBefore[i].ScrapeURL,
				infoBefore[i].Key, infoBefore[i].Owners, infoAfter[i].Key, infoAfter[i].Owners)
		}
	}
	if in, out := testutil.ToFloat64(f.metrics.movedIn), testutil.ToFloat64(f.metrics.movedOut); in != 0 || out != 0 {
		t.Errorf("volatile labels moved targets: in=%v out=%v", in, out)
	}
}

// TestNodesAgree runs one filter per node on the same ring and discovery:
// every valid target is owned by exactly replication-factor of them.
func TestNodesAgree(t *testing.T) {
	cfg := loadConfig(t, twoJobs)
	nodes := []string{"shoal-0", "shoal-1", "shoal-2", "shoal-3"}
	r := ring.New(nodes, 0)
	ts := discovery(500, "node", "app")
	for _, rf := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("rf=%d", rf), func(t *testing.T) {
			owners := map[string][]string{} // job/address -> nodes
			var reference []TargetInfo
			for _, n := range nodes {
				f := newFilter(t, FilterOptions{}, nil, nil, nil)
				if err := f.ApplyConfig(cfg); err != nil {
					t.Fatal(err)
				}
				f.SetRing(r, n, rf, true)
				f.merge(ts)
				out, _, _ := f.refilter(time.Now())
				for job, as := range addresses(out) {
					for _, a := range as {
						owners[job+"/"+a] = append(owners[job+"/"+a], n)
					}
				}
				// Every node computes the same owners for every target.
				infos := f.Targets()
				for i := range infos {
					infos[i].Owned, infos[i].DropReason = false, ""
				}
				if reference == nil {
					reference = infos
				} else if len(infos) != len(reference) {
					t.Fatalf("%s sees %d targets, others %d", n, len(infos), len(reference))
				} else {
					for i := range infos {
						if infos[i].Key != reference[i].Key || !slices.Equal(infos[i].Owners, reference[i].Owners) {
							t.Fatalf("%s disagrees on %s: %v vs %v", n, infos[i].ScrapeURL, infos[i].Owners, reference[i].Owners)
						}
					}
				}
				if got, want := f.OwnedCount(n), f.Owned(); got != want {
					t.Errorf("%s: OwnedCount=%d but it passes on %d", n, got, want)
				}
			}
			if len(owners) != 1000 {
				t.Fatalf("%d targets owned by someone, want all 1000", len(owners))
			}
			perNode := map[string]int{}
			for target, os := range owners {
				if len(os) != rf {
					t.Fatalf("%s owned by %v, want %d owners", target, os, rf)
				}
				for _, o := range os {
					perNode[o]++
				}
			}
			t.Logf("rf=%d: targets per node %v", rf, perNode)
		})
	}
}

func TestParticipation(t *testing.T) {
	cfg := loadConfig(t, twoJobs)
	three := ring.New([]string{"a", "b", "c"}, 0)
	for _, tc := range []struct {
		name        string
		ring        *ring.Ring
		participant bool
		owned       func(n int) bool
		reason      string
	}{
		{"nil ring owns all", nil, true, func(n int) bool { return n == 100 }, ""},
		{"nil ring, terminating", nil, false, func(n int) bool { return n == 0 }, ReasonNotParticipant},
		{"viewer owns none", three, false, func(n int) bool { return n == 0 }, ReasonNotParticipant},
		{"participant owns a share", three, true, func(n int) bool { return n > 10 && n < 70 }, "owned by "},
		{"not on the ring yet", ring.New([]string{"b", "c"}, 0), true, func(n int) bool { return n == 0 }, "owned by "},
		{"empty ring", ring.New(nil, 0), true, func(n int) bool { return n == 0 }, ReasonNoOwner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			f := newFilter(t, FilterOptions{}, nil, nil, reg)
			if err := f.ApplyConfig(cfg); err != nil {
				t.Fatal(err)
			}
			f.SetRing(tc.ring, "a", 1, tc.participant)
			f.merge(discovery(100, "node"))
			out, _, _ := f.refilter(time.Now())
			if n := count(out); !tc.owned(n) {
				t.Fatalf("owns %d of 100", n)
			}
			// The job is always passed on, with its groups, even when empty.
			if len(out["node"]) != 10 || out["node"][3].Source != "node/3" || out["node"][3].Labels["zone"] != "z1" {
				t.Fatalf("groups not preserved: %d groups", len(out["node"]))
			}
			for _, ti := range f.Targets() {
				if !ti.Owned && !strings.HasPrefix(ti.DropReason, tc.reason) {
					t.Fatalf("drop reason %q, want %q", ti.DropReason, tc.reason)
				}
			}
			if got := testutil.ToFloat64(f.metrics.owned.WithLabelValues("node")); int(got) != count(out) {
				t.Errorf("shoal_targets_owned=%v, passed on %d", got, count(out))
			}
			if got := testutil.ToFloat64(f.metrics.discovered.WithLabelValues("node")); got != 100 {
				t.Errorf("shoal_targets_discovered=%v", got)
			}
			wantRatio := 0.0
			switch {
			case !tc.participant:
			case tc.ring == nil:
				wantRatio = 1
			default:
				wantRatio = tc.ring.Share("a")
			}
			if got := testutil.ToFloat64(f.metrics.ownership); got != wantRatio {
				t.Errorf("shoal_ring_ownership_ratio=%v want %v", got, wantRatio)
			}
			if got := testutil.ToFloat64(f.metrics.ringTokens); int(got) != tc.ring.Tokens() {
				t.Errorf("shoal_ring_tokens=%v want %d", got, tc.ring.Tokens())
			}
			if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
				t.Errorf("metrics not registered: %d %v", n, err)
			}
		})
	}
}

// TestGainedTargetsWaitForHandoff: targets a ring change moves here appear
// only after the Handoff's delay when no release comes; brand-new targets
// are not counted as moved in, and bootstrapping (released at once) is not
// delayed.
func TestGainedTargetsWaitForHandoff(t *testing.T) {
	cfg := loadConfig(t, twoJobs)
	t.Run("gained from a peer", func(t *testing.T) {
		const delay = 400 * time.Millisecond
		h := startFilter(t, FilterOptions{Handoff: &recordingHandoff{delay: delay}, RingCoalesce: -1}, nil, cfg)
		// a is a participant, but the ring does not list it yet: b owns all.
		h.f.SetRing(ring.New([]string{"b"}, 0), "a", 1, true)
		h.send(t, discovery(200, "node"))
		h.waitOutput(t, 5*time.Second, "empty output", func(o tsets) bool { return count(o) == 0 })

		both := ring.New([]string{"a", "b"}, 0)
		start := time.Now()
		h.f.SetRing(both, "a", 1, true)
		waitFor(t, 5*time.Second, "targets waiting for hand-off", func() bool {
			for _, ti := range h.f.Targets() {
				if ti.DropReason == ReasonWaitingHandoff {
					return true
				}
			}
			return false
		})
		o := h.waitOutput(t, 5*time.Second, "gained targets", func(o tsets) bool { return count(o) > 0 })
		if waited := time.Since(start); waited < delay {
			t.Fatalf("gained targets passed on after %v, before the %v hand-off delay", waited, delay)
		}
		want := 0
		for _, ti := range h.f.Targets() {
			if ti.Owners[0] == "a" {
				want++
			}
		}
		if count(o) != want {
			t.Fatalf("passed on %d, ring gives a %d", count(o), want)
		}
		if got := testutil.ToFloat64(h.f.metrics.movedIn); int(got) != want {
			t.Errorf("moved in %v, want %d", got, want)
		}
	})
	t.Run("brand-new target", func(t *testing.T) {
		h := startFilter(t, FilterOptions{Handoff: &recordingHandoff{released: true, delay: time.Hour}, RingCoalesce: -1}, nil, cfg)
		r := ring.New([]string{"a", "b"}, 0)
		h.f.SetRing(r, "a", 1, true)
		h.send(t, discovery(50, "node"))
		first := h.waitOutput(t, 5*time.Second, "first output", func(tsets) bool { return true })
		h.send(t, discovery(100, "node"))
		h.waitOutput(t, 5*time.Second, "new targets", func(o tsets) bool { return count(o) > count(first) })
		if got := testutil.ToFloat64(h.f.metrics.movedIn); got != 0 {
			t.Errorf("new targets counted as moved: %v", got)
		}
	})
	t.Run("new targets held until this node's fence", func(t *testing.T) {
		// Discovered before the first view: the pass that places them
		// comes before this node's fence of the view, so the gate holds
		// them back once; they were new all the same.
		h := startFilter(t, FilterOptions{Handoff: &recordingHandoff{released: true, delay: time.Hour}, RingCoalesce: -1}, nil, cfg)
		h.send(t, discovery(50, "node"))
		h.f.SetRing(ring.New([]string{"a", "b"}, 0), "a", 1, true)
		h.waitOutput(t, 5*time.Second, "new targets", func(o tsets) bool { return count(o) > 0 })
		if got := testutil.ToFloat64(h.f.metrics.movedIn); got != 0 {
			t.Errorf("new targets counted as moved: %v", got)
		}
	})
	t.Run("single node bootstrap", func(t *testing.T) {
		h := startFilter(t, FilterOptions{Handoff: &recordingHandoff{released: true, delay: time.Hour}, RingCoalesce: -1}, nil, cfg)
		h.f.SetRing(ring.New(nil, 0), "a", 1, false)
		h.send(t, discovery(50, "node"))
		h.waitOutput(t, 5*time.Second, "nothing owned as viewer", func(o tsets) bool { return count(o) == 0 })
		h.f.SetRing(ring.New([]string{"a"}, 0), "a", 1, true)
		h.waitOutput(t, 5*time.Second, "everything owned at once", func(o tsets) bool { return count(o) == 50 })
	})
	t.Run("lost again while waiting", func(t *testing.T) {
		const delay = time.Second
		h := startFilter(t, FilterOptions{Handoff: &recordingHandoff{delay: delay}, RingCoalesce: -1}, nil, cfg)
		h.f.SetRing(ring.New([]string{"b"}, 0), "a", 1, true)
		h.send(t, discovery(100, "node"))
		h.waitOutput(t, 5*time.Second, "empty", func(o tsets) bool { return count(o) == 0 })
		start := time.Now()
		h.f.SetRing(ring.New([]string{"a", "b"}, 0), "a", 1, true)
		waitFor(t, 5*time.Second, "waiting targets", func() bool {
			h.f.mu.Lock()
			defer h.f.mu.Unlock()
			return len(h.f.waiting) > 0
		})
		final := ring.New([]string{"b"}, 0)
		h.f.SetRing(final, "a", 1, true)
		waitFor(t, 5*time.Second, "no waiting targets", func() bool {
			h.f.mu.Lock()
			defer h.f.mu.Unlock()
			return h.f.applied.ring == final
		})
		if h.f.Owned() != 0 {
			t.Fatalf("owns %d", h.f.Owned())
		}
		// Until well past the delay nothing is passed on.
		deadline := time.After(time.Until(start.Add(delay + 300*time.Millisecond)))
		for done := false; !done; {
			select {
			case o := <-h.out:
				if count(o) != 0 {
					t.Fatalf("target lost while waiting was passed on: %v", addresses(o))
				}
			case <-deadline:
				done = true
			}
		}
		if h.f.Owned() != 0 || testutil.ToFloat64(h.f.metrics.movedIn) != 0 {
			t.Fatalf("owns %d", h.f.Owned())
		}
	})
}

func TestSetRingCoalesced(t *testing.T) {
	cfg := loadConfig(t, twoJobs)
	h := startFilter(t, FilterOptions{RingCoalesce: 200 * time.Millisecond}, nil, cfg)
	h.f.SetRing(ring.New([]string{"a", "b"}, 0), "a", 1, true)
	h.send(t, discovery(100, "node"))
	h.waitOutput(t, 5*time.Second, "initial output", func(o tsets) bool { return count(o) > 0 && count(o) < 100 })
	h.f.mu.Lock()
	before := h.f.refilters
	h.f.mu.Unlock()

	for i := range 100 {
		h.f.SetRing(ring.New([]string{"a", "b", fmt.Sprintf("c%d", i)}, 16), "a", 1, true)
	}
	h.f.SetRing(ring.New([]string{"a"}, 16), "a", 1, true)
	h.waitOutput(t, 5*time.Second, "final ring applied", func(o tsets) bool { return count(o) == 100 })
	h.f.mu.Lock()
	runs := h.f.refilters - before
	h.f.mu.Unlock()
	// The burst takes far less than the window; allow one split.
	if runs > 2 {
		t.Fatalf("101 SetRing calls caused %d re-filters, want 1 (at most 2)", runs)
	}
	t.Logf("101 SetRing calls -> %d re-filter(s)", runs)
}

func TestConfigReload(t *testing.T) {
	h := startFilter(t, FilterOptions{RingCoalesce: -1}, nil, loadConfig(t, twoJobs))
	h.send(t, discovery(10, "node", "app", "unknown"))
	o := h.waitOutput(t, 5*time.Second, "both jobs", func(o tsets) bool { return count(o) == 20 })
	if _, ok := o["unknown"]; ok {
		t.Fatal("a job without scrape config was passed on")
	}
	// The app job goes away and node changes its metrics path: new keys.
	before := map[uint64]bool{}
	for _, ti := range h.f.Targets() {
		before[ti.Key] = true
	}
	if err := h.f.ApplyConfig(loadConfig(t, "scrape_configs:\n  - job_name: node\n    metrics_path: /m2\n")); err != nil {
		t.Fatal(err)
	}
	o = h.waitOutput(t, 5*time.Second, "node only", func(o tsets) bool { return count(o) == 10 && len(o) == 1 })
	for _, ti := range h.f.Targets() {
		if ti.Job != "node" || before[ti.Key] || !strings.HasSuffix(ti.ScrapeURL, "/m2") {
			t.Fatalf("after reload: %+v", ti)
		}
	}
	if err := h.f.ApplyConfig(nil); err == nil {
		t.Fatal("nil config accepted")
	}
}

// TestRunDoesNotBlockDiscovery: while nobody reads the output, discovery
// updates are still taken and the newest result wins.
func TestRunDoesNotBlockDiscovery(t *testing.T) {
	h := startFilter(t, FilterOptions{}, nil, loadConfig(t, twoJobs))
	for i := 1; i <= 20; i++ {
		h.send(t, discovery(i, "node"))
	}
	h.waitOutput(t, 5*time.Second, "latest state", func(o tsets) bool { return count(o) == 20 })
	h.send(t, tsets{"node": {&targetgroup.Group{Source: "x"}, nil}})
	o := h.waitOutput(t, 5*time.Second, "empty groups", func(o tsets) bool { return count(o) == 0 })
	if len(o["node"]) != 2 {
		t.Fatalf("groups: %v", o["node"])
	}
}

func TestTargetsSorted(t *testing.T) {
	f := newFilter(t, FilterOptions{}, nil, nil, nil)
	if err := f.ApplyConfig(loadConfig(t, twoJobs)); err != nil {
		t.Fatal(err)
	}
	f.merge(discovery(30, "node", "app"))
	f.refilter(time.Now())
	infos := f.Targets()
	if len(infos) != 60 {
		t.Fatalf("%d targets", len(infos))
	}
	if !slices.IsSortedFunc(infos, func(a, b TargetInfo) int {
		return strings.Compare(a.Job+" "+a.ScrapeURL, b.Job+" "+b.ScrapeURL)
	}) {
		t.Fatal("targets not sorted by job and URL")
	}
	if infos[0].Job != "app" || infos[0].Labels.Get("zone") != "z1" || infos[0].DiscoveredLabels.Get(model.AddressLabel) == "" {
		t.Fatalf("first target %+v", infos[0])
	}
}

// A second Filter on the same registry is refused (it used to log and go
// on unexported) and leaves the first one's metrics; Close unregisters them.
func TestFilterMetricsRegisteredOnceAndUnregisteredByClose(t *testing.T) {
	reg := prometheus.NewRegistry()
	f, err := NewFilter(FilterOptions{}, nil, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewFilter(FilterOptions{}, nil, nil, reg); err == nil {
		t.Fatal("a second Filter registered the same metrics")
	}
	if n, err := testutil.GatherAndCount(reg, "shoal_ring_tokens", "shoal_ring_ownership_ratio"); err != nil || n != 2 {
		t.Fatalf("the first Filter's metrics after the refused second: %d series, %v; want 2", n, err)
	}
	f.Close()
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d series left after Close (%v), want none", n, err)
	}
	if _, err := NewFilter(FilterOptions{}, nil, nil, reg); err != nil {
		t.Fatalf("a Filter after Close: %v", err)
	}
}
