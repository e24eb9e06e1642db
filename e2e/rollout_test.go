package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Configuration rollouts: a change reaches the replicas at different
// moments (kubelet refreshes each pod's ConfigMap on its own schedule; the
// chart's checksum annotation turns a change into a rolling restart), so
// for a while replicas run different configurations side by side. Each
// replica reads its own copy of the file here.

const (
	rolloutReplicas = 3
	rolloutTargets  = 20
	// rolloutApart is how far apart the change reaches the replicas.
	rolloutApart = 20 * time.Second
	// rolloutJob is the job line the change edits.
	rolloutJob = "  - job_name: \"e2e\"\n"
)

// newRolloutRun starts rolloutReplicas replicas, each on its own copy of
// the configuration, the receiver's default queue_config, and
// rolloutTargets targets.
func newRolloutRun(t *testing.T) *handoffRun {
	t.Helper()
	targets := startTargets(t, rolloutTargets, handoffLoad)
	recv := startReceiver(t)
	shared := writeConfig(t, t.TempDir(), configOpts{
		targets:        targetAddrs(targets),
		fileSD:         true,
		remoteWriteURL: recv.writeURL(),
		defaultQueue:   true,
	})
	body, err := os.ReadFile(shared)
	if err != nil {
		t.Fatal(err)
	}
	nodes := newClusterAgents(t, rolloutReplicas, shared, rolloutReplicas)
	for _, a := range nodes {
		own := filepath.Join(t.TempDir(), "shoal.yml")
		if err := os.WriteFile(own, body, 0o644); err != nil {
			t.Fatal(err)
		}
		a.spec.config = own
	}
	startCluster(t, nodes)
	waitConverged(t, nodes, targets)
	waitServed(t, targets, time.Now(), 2, convergeTimeout)
	return &handoffRun{t: t, targets: targets, recv: recv, nodes: nodes, began: time.Now(), failed: map[string]float64{}}
}

// addParams writes a's configuration with a URL parameter added to the
// job: every target's scrape URL changes, its series do not.
func addParams(t *testing.T, a *agent) {
	t.Helper()
	editConfig(t, a, func(cfg string) string {
		return strings.Replace(cfg, rolloutJob, rolloutJob+"    params:\n      v: [\"2\"]\n", 1)
	})
}

func editConfig(t *testing.T, a *agent, edit func(string) string) {
	t.Helper()
	cfg, err := os.ReadFile(a.spec.config)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), rolloutJob) {
		t.Fatalf("configuration has no %q:\n%s", rolloutJob, cfg)
	}
	changed := edit(string(cfg))
	if changed == string(cfg) {
		t.Fatal("the edit changed nothing")
	}
	if err := os.WriteFile(a.spec.config, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
}

// reloadNode asks a to reload and returns the answer's status code.
func reloadNode(t *testing.T, a *agent) int {
	t.Helper()
	resp, err := httpClient.Post(a.url("/-/reload"), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// scrapesNewURL reports whether every target a scrapes carries the new
// parameter, and how many it scrapes.
func scrapesNewURL(a *agent) (bool, int, error) {
	ts, err := a.activeTargets()
	if err != nil {
		return false, 0, err
	}
	for _, at := range ts {
		if !strings.Contains(at.ScrapeURL, "v=2") {
			return false, len(ts), nil
		}
	}
	return true, len(ts), nil
}

// waitNewURLEverywhere waits until every running replica scrapes every
// target it owns with the new configuration and returns when that was seen.
func waitNewURLEverywhere(t *testing.T, nodes []*agent) time.Time {
	t.Helper()
	eventually(t, convergeTimeout, "every replica scraping under the new configuration", func() error {
		for _, a := range nodes {
			ok, _, err := scrapesNewURL(a)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%s still scrapes a target with the old URL", a.spec.name)
			}
		}
		return nil
	})
	return time.Now()
}

// checkOneScraperAtATime fails when two different replicas scraped a
// target within half an interval of each other after from: two owners at
// once. Close scrapes by one replica (its loop replaced by one with the new
// URL, whose phase differs) are one owner.
func checkOneScraperAtATime(t *testing.T, targets []*target, from time.Time) {
	t.Helper()
	for _, tg := range targets {
		tg.mu.Lock()
		served := slices.Clone(tg.served)
		tg.mu.Unlock()
		for i := 1; i < len(served); i++ {
			if served[i].Before(from) || served[i].Sub(served[i-1]) >= scrapeInterval/2 {
				continue
			}
			_, who1 := tg.scrapeBy(i - 1)
			_, who2 := tg.scrapeBy(i)
			if who1 != "" && who2 != "" && who1 != who2 {
				t.Errorf("%s scraped by %s and %s within %v at %s: two owners at once", tg.addr, who1, who2,
					served[i].Sub(served[i-1]).Round(time.Millisecond), served[i].Format("15:04:05.000"))
				break
			}
		}
	}
}

// TestRolloutReloadReachesReplicasApart: a change that moves every scrape
// URL but keeps the series reaches the three replicas 20s apart, each
// reloading on its own. Replicas on the old and the new configuration agree
// on every owner (targets are placed by their series), so nothing moves:
// no refusal, no failed sample, no target without a sample for more than
// three intervals, and never two scrapers of one target.
func TestRolloutReloadReachesReplicasApart(t *testing.T) {
	needBinary(t)
	h := newRolloutRun(t)
	before, err := snapshotOwnership(h.nodes, h.targets)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Now()
	// The old loop's last scrape and the new loop's first are close when
	// the new URL shifts the scrape phase: within one replica, checked by
	// checkOneScraperAtATime rather than finish.
	h.phaseShiftFrom = first
	var last time.Time
	for i, a := range h.nodes {
		if i > 0 {
			time.Sleep(time.Until(first.Add(time.Duration(i) * rolloutApart))) // the rollout's pace, not a synchronisation
		}
		addParams(t, a)
		last = time.Now()
		if code := reloadNode(t, a); code != http.StatusOK {
			t.Fatalf("%s: reload: %d", a.spec.name, code)
		}
		// Between reloads the cluster runs two configurations: the
		// owners stay.
		mid, err := snapshotOwnership(h.nodes, h.targets)
		if err != nil {
			t.Fatalf("after %s's reload: %v", a.spec.name, err)
		}
		if moved := movedBetween(before, mid); moved != 0 {
			t.Errorf("after %s's reload %d targets changed owner; the change moves no series", a.spec.name, moved)
		}
	}
	done := waitNewURLEverywhere(t, h.nodes)
	h.phaseShiftTo = done.Add(2 * scrapeInterval)
	t.Logf("every replica scrapes under the new configuration %v after the last reload, %v after the first",
		done.Sub(last).Round(time.Millisecond), done.Sub(first).Round(time.Millisecond))
	waitServed(t, h.targets, time.Now(), 3, convergeTimeout)
	checkOneScraperAtATime(t, h.targets, h.began)
	longest := h.finish(true)
	st := h.recv.Stats()
	t.Logf("figures: refused %d, rolled back %d, longest gap %v", st.Rejected(), st.RolledBack, longest)
}

// TestRolloutRestartCarriesChange: a rolling restart that carries the same
// change, the replicas restarting one after the other on the new file.
func TestRolloutRestartCarriesChange(t *testing.T) {
	needBinary(t)
	h := newRolloutRun(t)
	first := time.Now()
	h.phaseShiftFrom = first
	for _, a := range h.nodes {
		addParams(t, a)
		h.stop(a)
		a.start()
		a.waitReady(startTimeout)
		owners := waitConverged(t, h.nodes, h.targets)
		if len(owners.targetsOf(a.spec.name)) == 0 {
			t.Errorf("%s owns nothing after its restart: %s", a.spec.name, owners.summary())
		}
	}
	done := waitNewURLEverywhere(t, h.nodes)
	h.phaseShiftTo = done.Add(2 * scrapeInterval)
	t.Logf("every replica scrapes under the new configuration %v after the first restart", done.Sub(first).Round(time.Millisecond))
	waitServed(t, h.targets, time.Now(), 3, convergeTimeout)
	checkOneScraperAtATime(t, h.targets, h.began)
	longest := h.finish(true)
	st := h.recv.Stats()
	t.Logf("figures: refused %d, rolled back %d, longest gap %v", st.Rejected(), st.RolledBack, longest)
}

// TestRolloutReplicaKeepsOldConfiguration: one replica's file is broken, so
// its reload is refused and it keeps the old configuration while the other
// two run the new one. Every replica names the drift (status API, metric),
// and scraping goes on with one owner per target.
func TestRolloutReplicaKeepsOldConfiguration(t *testing.T) {
	needBinary(t)
	h := newRolloutRun(t)
	stuck := h.nodes[2]
	h.phaseShiftFrom = time.Now()
	for _, a := range h.nodes[:2] {
		addParams(t, a)
		if code := reloadNode(t, a); code != http.StatusOK {
			t.Fatalf("%s: reload: %d", a.spec.name, code)
		}
	}
	editConfig(t, stuck, func(cfg string) string {
		return strings.Replace(cfg, rolloutJob, rolloutJob+"    params: [not, a, map]\n", 1)
	})
	if code := reloadNode(t, stuck); code == http.StatusOK {
		t.Fatalf("%s accepted a broken configuration", stuck.spec.name)
	}
	h.phaseShiftTo = time.Now().Add(2 * scrapeInterval)

	wantDrift := map[string][]string{}
	for _, a := range h.nodes[:2] {
		wantDrift[a.spec.name] = []string{stuck.spec.name}
	}
	wantDrift[stuck.spec.name] = []string{h.nodes[0].spec.name, h.nodes[1].spec.name}
	eventually(t, convergeTimeout, "drift reported by every replica", func() error {
		for _, a := range h.nodes {
			var st struct {
				Data struct {
					ConfigDrift []string `json:"configDrift"`
				} `json:"data"`
			}
			if err := a.getJSON("/api/v1/status/node", &st); err != nil {
				return err
			}
			if want := wantDrift[a.spec.name]; !slices.Equal(st.Data.ConfigDrift, want) {
				return fmt.Errorf("%s: configDrift %v, want %v", a.spec.name, st.Data.ConfigDrift, want)
			}
			v, err := a.metricValue("shoal_cluster_config_drift_peers", nil)
			if err != nil {
				return err
			}
			if int(v) != len(wantDrift[a.spec.name]) {
				return fmt.Errorf("%s: shoal_cluster_config_drift_peers = %v, want %d", a.spec.name, v, len(wantDrift[a.spec.name]))
			}
		}
		return nil
	})
	// The stuck replica scrapes its targets with the old URL, the others
	// with the new one, and each target has one owner.
	for _, a := range h.nodes {
		ok, n, err := scrapesNewURL(a)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 && ok == (a == stuck) {
			t.Errorf("%s scrapes with the new URL: %v, want %v", a.spec.name, ok, a != stuck)
		}
	}
	// Drift lasts: scraping goes on under it.
	time.Sleep(10 * time.Second) // the drift itself, not a synchronisation
	if _, err := snapshotOwnership(h.nodes, h.targets); err != nil {
		t.Errorf("under drift: %v", err)
	}
	checkOneScraperAtATime(t, h.targets, h.began)
	h.finish(true)
}

// movedBetween counts the targets whose owner differs between two snapshots.
func movedBetween(a, b ownership) int {
	n := 0
	for inst, owner := range a {
		if b[inst] != owner {
			n++
		}
	}
	return n
}
