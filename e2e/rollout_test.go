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
// replica reads its own copy of the file here. The change adds a URL
// parameter to the job: every target's key moves, its series stays.

const (
	rolloutReplicas = 3
	// rolloutApart is how far apart the change reaches the replicas.
	rolloutApart = 20 * time.Second
	// rolloutJob is the job line the change edits.
	rolloutJob = "  - job_name: \"e2e\"\n"
)

// newRolloutRun starts rolloutReplicas replicas of the hand-off fixture,
// each on its own copy of the configuration.
func newRolloutRun(t *testing.T, extraArgs ...string) *handoffRun {
	t.Helper()
	h, shared := newHandoffFixture(t)
	body, err := os.ReadFile(shared)
	if err != nil {
		fatal(t, err)
	}
	h.nodes = newClusterAgents(t, rolloutReplicas, shared, rolloutReplicas)
	for _, a := range h.nodes {
		own := filepath.Join(t.TempDir(), "shoal.yml")
		if err := os.WriteFile(own, body, 0o644); err != nil {
			fatal(t, err)
		}
		a.spec.config = own
		a.spec.extraArgs = append(a.spec.extraArgs, extraArgs...)
	}
	keepLogs(t, h.nodes)
	startCluster(t, h.nodes)
	waitConverged(t, h.nodes, h.targets)
	waitPlacementSettled(t, h.nodes, h.targets)
	waitServed(t, h.targets, time.Now(), 2, convergeTimeout)
	h.began = time.Now()
	return h
}

// addParams writes a's configuration with a URL parameter added to the
// job: every target's scrape URL (and key) changes, its series do not.
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
		fatal(t, err)
	}
	if !strings.Contains(string(cfg), rolloutJob) {
		fatalf(t, "configuration has no %q:\n%s", rolloutJob, cfg)
	}
	changed := edit(string(cfg))
	if changed == string(cfg) {
		fatal(t, "the edit changed nothing")
	}
	if err := os.WriteFile(a.spec.config, []byte(changed), 0o644); err != nil {
		fatal(t, err)
	}
}

// reloadNode asks a to reload and returns the answer's status code.
func reloadNode(t *testing.T, a *agent) int {
	t.Helper()
	resp, err := httpClient.Post(a.url("/-/reload"), "", nil)
	if err != nil {
		fatal(t, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// nodeConfig is the scrape configuration part of /api/v1/status/node.
type nodeConfig struct {
	ConfigDrift  []string `json:"configDrift"`
	ScrapeConfig struct {
		Current      string `json:"current"`
		Previous     string `json:"previous"`
		PlacingBy    string `json:"placingBy"`
		Rule         string `json:"rule"`
		SteppedAside bool   `json:"steppedAside"`
	} `json:"scrapeConfig"`
}

func (a *agent) scrapeConfig() (nodeConfig, error) {
	var st struct {
		Data nodeConfig `json:"data"`
	}
	err := a.getJSON("/api/v1/status/node", &st)
	return st.Data, err
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

// waitRolledOut waits until every replica scrapes with the new URL and
// places targets by the new configuration, every target on one of them,
// and returns when that was seen.
func waitRolledOut(t *testing.T, nodes []*agent, targets []*target) time.Time {
	t.Helper()
	eventually(t, convergeTimeout, "every replica scraping and placing under the new configuration", func() error {
		for _, a := range nodes {
			ok, _, err := scrapesNewURL(a)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("%s still scrapes a target with the old URL", a.spec.name)
			}
			sc, err := a.scrapeConfig()
			if err != nil {
				return err
			}
			if c := sc.ScrapeConfig; c.PlacingBy != c.Current || c.Previous != "" {
				return fmt.Errorf("%s places by %s, runs %s (kept %q)", a.spec.name, c.PlacingBy, c.Current, c.Previous)
			}
		}
		_, err := snapshotOwnership(nodes, targets)
		return err
	})
	return time.Now()
}

// scrapedOnce checks that every target is active on exactly one of nodes
// and returns how many each scrapes.
func scrapedOnce(nodes []*agent, targets []*target) (map[string]int, error) {
	owner := map[string]string{}
	per := map[string]int{}
	for _, a := range nodes {
		ts, err := a.activeTargets()
		if err != nil {
			return nil, err
		}
		per[a.spec.name] = len(ts)
		for inst := range ts {
			if o, dup := owner[inst]; dup {
				return nil, fmt.Errorf("%s active on %s and %s", inst, o, a.spec.name)
			}
			owner[inst] = a.spec.name
		}
	}
	for _, tg := range targets {
		if _, ok := owner[tg.addr]; !ok {
			return nil, fmt.Errorf("%s active nowhere", tg.addr)
		}
	}
	return per, nil
}

// checkOneScraperAtATime fails when two replicas scraped a target at once
// after from: their scrapes interleave (one, the other, the first again)
// within one and a half intervals. A hand-off passes a target on once and
// the new owner's phase may fall anywhere in the interval, so two scrapes
// by different replicas close together are not two owners; a replica that
// scrapes again after another began is, unless it was restarted between
// (another process): a rolling restart can hand a target from a
// terminating replica to another and back to its next life within an
// interval and a half (seen with three replicas).
func checkOneScraperAtATime(t *testing.T, targets []*target, from time.Time) {
	t.Helper()
	for _, tg := range targets {
		tg.mu.Lock()
		served := slices.Clone(tg.served)
		tg.mu.Unlock()
		for i := 2; i < len(served); i++ {
			if served[i-2].Before(from) || served[i].Sub(served[i-2]) >= 3*scrapeInterval/2 {
				continue
			}
			_, first := tg.scrapeBy(i - 2)
			_, other := tg.scrapeBy(i - 1)
			_, again := tg.scrapeBy(i)
			if first != "" && other != "" && first != other && again == first && tg.lifeOf(i-2) == tg.lifeOf(i) {
				errorf(t, "%s scraped by %s, %s and %s again within %v at %s: two owners at once", tg.addr, first, other, first,
					served[i].Sub(served[i-2]).Round(time.Millisecond), served[i].Format("15:04:05.000"))
				break
			}
		}
	}
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

// TestRolloutReloadReachesReplicasApart: a change that moves every key but
// keeps the series reaches the three replicas 20s apart, each reloading on
// its own. Until the last one has it, the cluster keeps placing targets by
// the old configuration (each replica scrapes its targets under the new
// one): no target moves. Then every key moves in one hand-off generation.
// No refusal, no failed sample, no target without a sample for more than
// three intervals (a moved key scrapes at another phase; see
// TestRolloutRestartCarriesChange), never two scrapers of one target.
func TestRolloutReloadReachesReplicasApart(t *testing.T) {
	needBinary(t)
	h := newRolloutRun(t)
	before, err := snapshotOwnership(h.nodes, h.targets)
	if err != nil {
		fatal(t, err)
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
			fatalf(t, "%s: reload: %d", a.spec.name, code)
		}
		if i == len(h.nodes)-1 {
			break
		}
		eventually(t, convergeTimeout, a.spec.name+" scraping under the new configuration", func() error {
			if ok, _, err := scrapesNewURL(a); err != nil || !ok {
				return fmt.Errorf("not yet (%v)", err)
			}
			return nil
		})
		// Between reloads the cluster places by the old configuration:
		// the owners stay.
		mid := waitConverged(t, h.nodes, h.targets)
		if moved := movedBetween(before, mid); moved != 0 {
			errorf(t, "after %s's reload %d targets changed owner; the cluster still places by the old configuration", a.spec.name, moved)
		}
		if sc, err := a.scrapeConfig(); err != nil || sc.ScrapeConfig.PlacingBy == sc.ScrapeConfig.Current {
			errorf(t, "%s after its reload: %+v (%v), want it placing by its previous configuration", a.spec.name, sc, err)
		}
	}
	done := waitRolledOut(t, h.nodes, h.targets)
	h.phaseShiftTo = done.Add(2 * scrapeInterval)
	after, err := snapshotOwnership(h.nodes, h.targets)
	if err != nil {
		fatal(t, err)
	}
	t.Logf("figures: every replica scrapes and places under the new configuration %v after the last reload, %v after the first; the switch moved %d of %d targets",
		done.Sub(last).Round(time.Millisecond), done.Sub(first).Round(time.Millisecond), movedBetween(before, after), len(h.targets))
	waitServed(t, h.targets, time.Now(), 3, convergeTimeout)
	checkOneScraperAtATime(t, h.targets, h.began)
	longest := h.finish(true)
	st := h.recv.Stats()
	t.Logf("figures: refused %d, rolled back %d, longest gap %v", st.Rejected(), st.RolledBack, longest)
}

// TestRolloutRestartCarriesChange: a rolling restart that carries the same
// change, the replicas restarting one after the other on the new file. A
// restarted replica has no previous configuration at hand: it steps aside
// until most replicas run the new one, then the old ones do; each step is
// a hand-off.
func TestRolloutRestartCarriesChange(t *testing.T) {
	needBinary(t)
	h := newRolloutRun(t)
	first := time.Now()
	h.phaseShiftFrom = first
	// The change moves every key, and Prometheus derives a target's scrape
	// phase from its URL: a target the cluster moves to its new key is
	// scraped at another phase, up to an interval later. Its gap is up to
	// an interval before the old owner's fence, the fence's push to the new
	// owner (milliseconds; cluster/metapush.go) and an interval of phase:
	// two intervals, within the three of handoffGapBound. Before fences
	// were pushed their gossip could take the hand-off delay (2s) more.
	for _, a := range h.nodes {
		addParams(t, a)
		h.stop(a)
		a.start()
		a.waitReady(startTimeout)
		// As a rolling update waits for the pod it replaced: every node a
		// participant in every view, one agreed configuration, every
		// target on one replica (some may step aside).
		eventually(t, convergeTimeout, "settled after "+a.spec.name+"'s restart", func() error {
			placing := map[string]bool{}
			for _, b := range h.nodes {
				pr, err := b.peers()
				if err != nil {
					return err
				}
				for _, p := range pr.Data.Peers {
					if p.State != "participant" {
						return fmt.Errorf("%s sees %s %s", b.spec.name, p.Name, p.State)
					}
				}
				if len(pr.Data.Peers) != len(h.nodes) {
					return fmt.Errorf("%s sees %d peers", b.spec.name, len(pr.Data.Peers))
				}
				sc, err := b.scrapeConfig()
				if err != nil {
					return err
				}
				placing[sc.ScrapeConfig.PlacingBy] = true
			}
			if len(placing) != 1 {
				return fmt.Errorf("replicas place by %v", placing)
			}
			per, err := scrapedOnce(h.nodes, h.targets)
			if err == nil {
				t.Logf("after %s's restart: %v", a.spec.name, per)
			}
			return err
		})
		waitServed(t, h.targets, time.Now(), 2, convergeTimeout)
	}
	done := waitRolledOut(t, h.nodes, h.targets)
	h.phaseShiftTo = done.Add(2 * scrapeInterval)
	t.Logf("figures: every replica scrapes and places under the new configuration %v after the first restart", done.Sub(first).Round(time.Millisecond))
	waitServed(t, h.targets, time.Now(), 3, convergeTimeout)
	checkOneScraperAtATime(t, h.targets, h.began)
	longest := h.finish(true)
	st := h.recv.Stats()
	t.Logf("figures: refused %d, rolled back %d, longest gap %v", st.Rejected(), st.RolledBack, longest)
}

// TestRolloutReplicaKeepsOldConfiguration: one replica's file is broken, so
// its reload is refused and it keeps the old configuration while the other
// two run the new one. Every replica names the drift (status API, metric);
// until --cluster.handoff-timeout the cluster places by the old
// configuration, then by the new one, and the replica on the old one steps
// aside. Never two scrapers of a target; when the file is fixed, it takes
// its share again.
func TestRolloutReplicaKeepsOldConfiguration(t *testing.T) {
	needBinary(t)
	const timeout = 20 * time.Second
	h := newRolloutRun(t, fmt.Sprintf("--cluster.handoff-timeout=%v", timeout))
	stuck := h.nodes[2]
	h.phaseShiftFrom = time.Now()
	for _, a := range h.nodes[:2] {
		addParams(t, a)
		if code := reloadNode(t, a); code != http.StatusOK {
			fatalf(t, "%s: reload: %d", a.spec.name, code)
		}
	}
	split := time.Now()
	editConfig(t, stuck, func(cfg string) string {
		return strings.Replace(cfg, rolloutJob, rolloutJob+"    params: [not, a, map]\n", 1)
	})
	if code := reloadNode(t, stuck); code == http.StatusOK {
		fatalf(t, "%s accepted a broken configuration", stuck.spec.name)
	}

	wantDrift := map[string][]string{}
	for _, a := range h.nodes[:2] {
		wantDrift[a.spec.name] = []string{stuck.spec.name}
	}
	wantDrift[stuck.spec.name] = []string{h.nodes[0].spec.name, h.nodes[1].spec.name}
	eventually(t, convergeTimeout, "drift reported by every replica", func() error {
		for _, a := range h.nodes {
			sc, err := a.scrapeConfig()
			if err != nil {
				return err
			}
			if want := wantDrift[a.spec.name]; !slices.Equal(sc.ConfigDrift, want) {
				return fmt.Errorf("%s: configDrift %v, want %v", a.spec.name, sc.ConfigDrift, want)
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
	// Before the timeout: placed by the old configuration, every replica
	// scraping its share, each under its own configuration.
	err := poll(timeout/2, func() error {
		_, err := snapshotOwnership(h.nodes, h.targets)
		return err
	})
	if err != nil && time.Since(split) < timeout {
		errorf(t, "during the drift: %v", err)
	}
	for _, a := range h.nodes {
		ok, n, err := scrapesNewURL(a)
		if err != nil {
			fatal(t, err)
		}
		if n > 0 && ok == (a == stuck) && time.Since(split) < timeout {
			errorf(t, "%s scrapes with the new URL: %v, want %v", a.spec.name, ok, a != stuck)
		}
	}

	// After it: the stuck replica steps aside, the two others scrape all.
	eventually(t, timeout+convergeTimeout, stuck.spec.name+" stepping aside", func() error {
		sc, err := stuck.scrapeConfig()
		if err != nil {
			return err
		}
		if !sc.ScrapeConfig.SteppedAside {
			return fmt.Errorf("%s: %+v", stuck.spec.name, sc.ScrapeConfig)
		}
		if v, err := stuck.metricValue("shoal_cluster_config_stepped_aside", nil); err != nil || v != 1 {
			return fmt.Errorf("shoal_cluster_config_stepped_aside = %v (%v)", v, err)
		}
		per, err := scrapedOnce(h.nodes, h.targets)
		if err != nil {
			return err
		}
		if per[stuck.spec.name] != 0 {
			return fmt.Errorf("%s still scrapes %d targets", stuck.spec.name, per[stuck.spec.name])
		}
		return nil
	})
	stepped := time.Now()
	t.Logf("figures: %s stepped aside %v after the split (--cluster.handoff-timeout=%v)", stuck.spec.name, stepped.Sub(split).Round(time.Millisecond), timeout)
	time.Sleep(5 * time.Second) // the degraded state itself, not a synchronisation
	if _, err := scrapedOnce(h.nodes, h.targets); err != nil {
		errorf(t, "while %s steps aside: %v", stuck.spec.name, err)
	}

	// The file fixed: it takes its share again.
	editConfig(t, stuck, func(cfg string) string {
		return strings.Replace(cfg, "    params: [not, a, map]\n", "    params:\n      v: [\"2\"]\n", 1)
	})
	if code := reloadNode(t, stuck); code != http.StatusOK {
		fatalf(t, "%s: reload of the fixed file: %d", stuck.spec.name, code)
	}
	done := waitRolledOut(t, h.nodes, h.targets)
	h.phaseShiftTo = done.Add(2 * scrapeInterval)
	checkOneScraperAtATime(t, h.targets, h.began)
	longest := h.finish(true)
	st := h.recv.Stats()
	t.Logf("figures: refused %d, rolled back %d, longest gap %v", st.Rejected(), st.RolledBack, longest)
}
