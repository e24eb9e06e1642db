package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// Membership changes under the bounded placement, on real processes with
// the real receiver: a scale-out and back in, a SIGKILL, and replication
// factor 2. Each asserts the hand-off guarantees the ring placement has:
// nothing refused at the receiver, nothing scraped twice, gaps bounded.

// addBoundedNode prepares one more node for h with the bounded placement.
func addBoundedNode(h *handoffRun, extra ...string) *agent {
	a := h.addNode()
	a.spec.extraArgs = append(a.spec.extraArgs, "--cluster.placement=bounded")
	a.spec.extraArgs = append(a.spec.extraArgs, extra...)
	return a
}

// TestPlacementBoundedScaleOutAndIn adds a fifth node to four balanced
// ones, waits until the placement is balanced over five, then stops it and
// waits for the balance over four.
func TestPlacementBoundedScaleOutAndIn(t *testing.T) {
	h, targets, size := startBounded(t)
	fifth := addBoundedNode(h)
	fifth.start()
	fifth.waitReady(startTimeout)
	after := waitConverged(t, h.nodes, targets)
	if len(after.targetsOf(fifth.spec.name)) == 0 {
		t.Fatalf("the fifth node took no target: %s", after.summary())
	}
	waitBalanced(t, h.nodes, targets, size)
	h.stop(fifth)
	waitConverged(t, h.running(), targets)
	waitBalanced(t, h.running(), targets, size)
	h.finish(true)
}

// TestPlacementBoundedSIGKILL kills a node that holds targets: the
// survivors take its targets over within failure detection + hand-off
// delay + two intervals, balance again, and the receiver refuses nothing.
func TestPlacementBoundedSIGKILL(t *testing.T) {
	h, targets, size := startBounded(t)
	owners, err := snapshotOwnership(h.nodes, targets)
	if err != nil {
		t.Fatal(err)
	}
	victim := h.nodes[1]
	orphans := owners.targetsOf(victim.spec.name)
	if len(orphans) == 0 {
		t.Fatalf("%s owns nothing: %s", victim.spec.name, owners.summary())
	}
	byAddr := map[string]*target{}
	for _, tg := range targets {
		byAddr[tg.addr] = tg
	}
	victim.kill()
	killed := time.Now()
	bound := failureDetection + handoffDelay + 2*scrapeInterval
	var covered time.Duration
	eventually(t, convergeTimeout, "every orphaned target scraped again", func() error {
		covered = 0
		for _, inst := range orphans {
			at, ok := byAddr[inst].firstServedAfter(killed)
			if !ok {
				return fmt.Errorf("%s not scraped since the kill %v ago", inst, time.Since(killed).Round(time.Millisecond))
			}
			covered = max(covered, at.Sub(killed))
		}
		return nil
	})
	t.Logf("SIGKILL of %s (%d targets): all scraped again after %v (bound %v)", victim.spec.name, len(orphans), covered.Round(time.Millisecond), bound)
	if covered > bound {
		t.Errorf("coverage back after %v, bound failure detection + hand-off delay + 2 intervals = %v", covered, bound)
	}
	waitBalanced(t, h.running(), targets, size)
	// The killed node's unsent samples stay in its WAL: values may be
	// missing; ordering, one series per target and the gaps after the
	// take-over still hold.
	h.began = killed.Add(bound)
	h.finish(false)
}

// TestPlacementBoundedReplicationFactorTwo: with --cluster.replication-factor=2
// the bounded placement gives every target two distinct owners, each
// scrapes it with its rank as the replica label, and the receiver gets one
// clean series per target and rank with no refusal and bounded gaps, also
// after the weights are published and across a scale-out that moves ranks.
func TestPlacementBoundedReplicationFactorTwo(t *testing.T) {
	needBinary(t)
	const rf = 2
	small := startTargets(t, 40, smallLoad)
	large := startTargets(t, 2, largeLoad)
	targets := append(slices.Clone(small), large...)
	recv := startReceiver(t)
	cfg := writeConfig(t, t.TempDir(), configOpts{
		targets:        targetAddrs(targets),
		fileSD:         true,
		remoteWriteURL: recv.writeURL(),
		defaultQueue:   true,
	})
	nodes := newClusterAgents(t, 3, cfg, 3)
	args := []string{"--cluster.placement=bounded", fmt.Sprintf("--cluster.replication-factor=%d", rf)}
	for _, a := range nodes {
		a.spec.extraArgs = append(a.spec.extraArgs, args...)
	}
	keepLogs(t, nodes)
	startCluster(t, nodes)
	h := &handoffRun{t: t, targets: targets, recv: recv, nodes: nodes, failed: map[string]float64{}}

	converged := func(nodes []*agent) {
		t.Helper()
		eventually(t, weightsTimeout, "every target scraped by its two owners under the published weights", func() error {
			for _, a := range nodes {
				placed, err := a.metricValue("shoal_placement_weights_placed", nil)
				if err != nil {
					return err
				}
				if int(placed) != len(targets) {
					return fmt.Errorf("%s places %v published weights, want %d", a.spec.name, placed, len(targets))
				}
			}
			scrapers := map[string][]string{}
			for _, a := range nodes {
				active, err := a.activeTargets()
				if err != nil {
					return err
				}
				for inst, at := range active {
					if at.Health != "up" {
						return fmt.Errorf("%s on %s: health %q", inst, a.spec.name, at.Health)
					}
					scrapers[inst] = append(scrapers[inst], a.spec.name)
				}
			}
			for _, tg := range targets {
				if got := scrapers[tg.addr]; len(got) != rf {
					return fmt.Errorf("%s scraped by %v, want %d nodes", tg.addr, got, rf)
				}
			}
			for _, a := range nodes {
				if err := checkPlacement(a, targets, rf); err != nil {
					return err
				}
			}
			return nil
		})
	}
	converged(nodes)
	h.began = time.Now()
	waitServed(t, targets, h.began, 3*rf, convergeTimeout)

	// Scale out: ranks move to the newcomer, some from rank 1 to rank 0.
	fourth := addBoundedNode(h, fmt.Sprintf("--cluster.replication-factor=%d", rf))
	fourth.start()
	fourth.waitReady(startTimeout)
	converged(h.nodes)
	active, err := fourth.activeTargets()
	if err != nil {
		t.Fatal(err)
	}
	if len(active) == 0 {
		t.Fatal("the fourth node took no replica")
	}

	ended := time.Now()
	waitServed(t, targets, ended, 3*rf, convergeTimeout)
	waitReceiverCaughtUp(t, recv, targets, ended)
	recv.checkNoRejections(t)
	if st := recv.Stats(); st.Dropped != 0 {
		t.Errorf("receiver dropped %d exact duplicates: two nodes wrote the same series", st.Dropped)
	}
	checkNoFailedSamples(t, h.nodes)
	ups, err := recv.seriesOf("up")
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSeriesClean(ups); err != nil {
		t.Error(err)
	}
	var longest time.Duration
	var longestAt string
	for inst, g := range byInstance(ups) {
		replicas := map[string]bool{}
		for _, s := range g {
			replicas[s.labels.Get("replica")] = true
			for i := 1; i < len(s.samples); i++ {
				if s.samples[i].T < h.began.UnixMilli() {
					continue
				}
				if gap := time.Duration(s.samples[i].T-s.samples[i-1].T) * time.Millisecond; gap > longest {
					longest, longestAt = gap, fmt.Sprintf("%s replica %s at %s", inst, s.labels.Get("replica"), msTime(s.samples[i].T))
				}
			}
		}
		if len(g) != rf || !replicas["0"] || !replicas["1"] {
			t.Errorf("%s: %d up series with replica labels %v, want one for each of the ranks 0 and 1", inst, len(g), replicas)
		}
	}
	t.Logf("longest per-series gap %v (%s); bound %v", longest, longestAt, handoffGapBound)
	if longest > handoffGapBound {
		t.Errorf("a replica went %v without a sample (%s); bound %v", longest, longestAt, handoffGapBound)
	}
	var loads []string
	for _, a := range h.nodes {
		var r placementPeersResponse
		if err := a.getJSON("/api/v1/cluster/peers", &r); err == nil {
			for _, p := range r.Data.Peers {
				if p.Name == a.spec.name {
					loads = append(loads, fmt.Sprintf("%s=%.0f/%.0f", p.Name, p.PlacementLoad, p.PlacementLimit))
				}
			}
		}
	}
	t.Logf("placed load/limit per node (both ranks): %s", strings.Join(loads, " "))
}
