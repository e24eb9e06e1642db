package e2e

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
)

// shardedTargets is the number of targets the sharding tests spread over the
// cluster.
const shardedTargets = 60

// TestClusterOfThree starts three clustered agents, each joining the other
// two, and checks that all of them see all three as participants.
func TestClusterOfThree(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 6, 0)
	cfg := writeConfig(t, t.TempDir(), configOpts{targets: targetAddrs(targets)})
	nodes := newClusterAgents(t, 3, cfg, 0)
	startCluster(t, nodes)

	names := []string{"node-1", "node-2", "node-3"}
	for _, a := range nodes {
		eventually(t, convergeTimeout, a.spec.name+" sees three participants", func() error {
			pr, err := a.peers()
			if err != nil {
				return err
			}
			if pr.Data.Self != a.spec.name {
				return fmt.Errorf("data.self = %q, want %q", pr.Data.Self, a.spec.name)
			}
			var got []string
			owned := 0
			for _, p := range pr.Data.Peers {
				if p.State != "participant" {
					return fmt.Errorf("peer %s is %q", p.Name, p.State)
				}
				if p.Self != (p.Name == a.spec.name) {
					return fmt.Errorf("peer %s has self=%v", p.Name, p.Self)
				}
				if p.Address == "" {
					return fmt.Errorf("peer %s has no address", p.Name)
				}
				if p.RingShare <= 0 || p.RingShare >= 1 {
					return fmt.Errorf("peer %s has ringShare %v", p.Name, p.RingShare)
				}
				owned += p.OwnedTargets
				got = append(got, p.Name)
			}
			slices.Sort(got)
			if !slices.Equal(got, names) {
				return fmt.Errorf("peers %v, want %v", got, names)
			}
			if owned != len(targets) {
				return fmt.Errorf("ownedTargets sum to %d, want %d", owned, len(targets))
			}
			v, err := a.metricValue("cluster_node_peers", map[string]string{"state": "participant"})
			if err != nil {
				return err
			}
			if v != 3 {
				return fmt.Errorf(`cluster_node_peers{state="participant"} = %v, want 3`, v)
			}
			return nil
		})
	}
	// Peer addresses are the advertised gossip addresses.
	pr, err := nodes[0].peers()
	if err != nil {
		fatal(t, err)
	}
	for _, p := range pr.Data.Peers {
		for _, a := range nodes {
			if a.spec.name == p.Name && p.Address != a.gossipAddr && p.Address != a.spec.ip {
				errorf(t, "peer %s has address %q, want %s", p.Name, p.Address, a.gossipAddr)
			}
		}
	}
	waitConverged(t, nodes, targets)
}

// shardedSetup starts shardedTargets targets, a receiver and a cluster of n
// nodes that wait for each other (--cluster.wait-for-size=n), and waits until
// the targets are partitioned among the nodes.
func shardedSetup(t *testing.T, n int) ([]*target, *testReceiver, []*agent, ownership) {
	t.Helper()
	targets := startTargets(t, shardedTargets, 0)
	recv := startReceiver(t)
	cfg := writeConfig(t, t.TempDir(), configOpts{
		targets:        targetAddrs(targets),
		fileSD:         true,
		remoteWriteURL: recv.writeURL(),
		externalLabels: map[string]string{"cluster": "e2e"},
		defaultQueue:   true,
	})
	nodes := newClusterAgents(t, n, cfg, n)
	startCluster(t, nodes)
	owners := waitConverged(t, nodes, targets)
	return targets, recv, nodes, owners
}

// TestConvergedSharding checks that three replicas partition 60 targets:
// each is scraped by exactly one of them, and the receiver gets exactly one
// clean series per target.
func TestConvergedSharding(t *testing.T) {
	needBinary(t)
	targets, recv, nodes, owners := shardedSetup(t, 3)

	// The ownership metric agrees with the targets API.
	owned := 0.0
	for _, a := range nodes {
		v, err := a.metricValue("shoal_targets_owned", map[string]string{"job": "e2e"})
		if err != nil {
			errorf(t, "%s: %v", a.spec.name, err)
			continue
		}
		if want := len(owners.targetsOf(a.spec.name)); v != float64(want) {
			errorf(t, "%s: shoal_targets_owned = %v, targets API lists %d", a.spec.name, v, want)
		}
		owned += v
	}
	if owned != shardedTargets {
		errorf(t, "shoal_targets_owned sums to %v, want %d", owned, shardedTargets)
	}

	// Converged: over a window of several scrape intervals, each target is
	// scraped once per interval, not once per replica.
	w0 := time.Now()
	waitServed(t, targets, w0, 6, convergeTimeout)
	w1 := time.Now()
	limit := int(w1.Sub(w0)/scrapeInterval) + 2
	for _, tg := range targets {
		if n := tg.servedBetween(w0, w1); n > limit {
			errorf(t, "%s scraped %d times in %v: more than one owner", tg.addr, n, w1.Sub(w0).Round(time.Millisecond))
		}
	}
	if _, err := snapshotOwnership(nodes, targets); err != nil {
		errorf(t, "after the window: %v", err)
	}

	waitReceiverCaughtUp(t, recv, targets, w1)
	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	upBy := byInstance(ups)
	if len(upBy) != shardedTargets {
		errorf(t, "receiver has up series for %d instances, want %d", len(upBy), shardedTargets)
	}
	for _, tg := range targets {
		if g := upBy[tg.addr]; len(g) != 1 {
			errorf(t, "%s: %d up series, want exactly 1: %s", tg.addr, len(g), seriesLabels(g))
		}
	}
	if err := checkSeriesClean(ups); err != nil {
		fail(t, err)
	}
	vals, err := recv.counterValues()
	if err != nil {
		fatal(t, err)
	}
	for _, tg := range targets {
		if _, err := missingValues(vals[tg.addr], 0); err != nil {
			errorf(t, "%s: %v", tg.addr, err)
		}
	}
	recv.checkNoRejections(t)
	if st := recv.Stats(); st.Dropped != 0 {
		errorf(t, "receiver dropped %d exact duplicate samples: some samples were sent twice", st.Dropped)
	}
}

// TestFailoverAfterSIGKILL kills one of three replicas and checks that the
// survivors take over its targets once memberlist declares it dead.
func TestFailoverAfterSIGKILL(t *testing.T) {
	needBinary(t)
	targets, recv, nodes, owners := shardedSetup(t, 3)
	victim := nodes[1]
	orphans := owners.targetsOf(victim.spec.name)
	if len(orphans) == 0 {
		fatalf(t, "%s owns no targets: %s", victim.spec.name, owners.summary())
	}
	survivors := []*agent{nodes[0], nodes[2]}

	// Every orphan is scraped again. The time to full coverage is failure
	// detection + hand-off delay + the first scrape's offset.
	killed, _ := killAndAwaitCoverage(t, victim, orphans, targets)

	waitConverged(t, survivors, targets)
	for _, a := range survivors {
		eventually(t, convergeTimeout, a.spec.name+" counts two participants", func() error {
			v, err := a.metricValue("cluster_node_peers", map[string]string{"state": "participant"})
			if err != nil {
				return err
			}
			if v != 2 {
				return fmt.Errorf(`cluster_node_peers{state="participant"} = %v, want 2`, v)
			}
			return nil
		})
	}

	// The orphans' series resume at the receiver, in the same series.
	resumed := time.Now()
	waitServed(t, targets, resumed, 2, convergeTimeout)
	waitReceiverCaughtUp(t, recv, targets, resumed)
	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	upBy := byInstance(ups)
	for _, inst := range orphans {
		g := upBy[inst]
		if len(g) != 1 {
			errorf(t, "%s: %d up series, want 1: %s", inst, len(g), seriesLabels(g))
			continue
		}
		after := 0
		for _, s := range g[0].samples {
			if s.T > killed.UnixMilli() {
				after++
				if s.V != 1 {
					errorf(t, "%s: up=%v at %s after the failover", inst, s.V, msTime(s.T))
				}
			}
		}
		if after == 0 {
			errorf(t, "%s: no up sample after the kill", inst)
		}
	}
	if err := checkSeriesClean(ups); err != nil {
		fail(t, err)
	}
	recv.checkNoRejections(t)
}

// gapBound is the longest a target may go without a sample during a rolling
// restart: the hand-off bound (see handoffGapBound).
const gapBound = handoffGapBound

// TestRollingRestart restarts the three replicas one after the other and
// checks that no target goes unscraped for longer than gapBound, that no
// series gets a staleness marker and that the receiver rejects nothing.
func TestRollingRestart(t *testing.T) {
	needBinary(t)
	targets, recv, nodes, _ := shardedSetup(t, 3)
	waitServed(t, targets, time.Now(), 2, convergeTimeout)
	began := time.Now()

	for _, a := range nodes {
		stopped := time.Now()
		a.stop()
		t.Logf("%s stopped in %v", a.spec.name, time.Since(stopped).Round(time.Millisecond))
		a.start()
		a.waitReady(startTimeout)
		owners := waitConverged(t, nodes, targets)
		if len(owners.targetsOf(a.spec.name)) == 0 {
			errorf(t, "%s owns nothing after its restart: %s", a.spec.name, owners.summary())
		}
	}
	ended := time.Now()
	waitServed(t, targets, ended, 2, convergeTimeout)
	waitReceiverCaughtUp(t, recv, targets, ended)

	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	upBy := byInstance(ups)
	var longest time.Duration
	var longestAt string
	for _, tg := range targets {
		g := upBy[tg.addr]
		if len(g) != 1 {
			errorf(t, "%s: %d up series, want 1 (a moved target continues its series): %s", tg.addr, len(g), seriesLabels(g))
			continue
		}
		ss := g[0].samples
		for i := 1; i < len(ss); i++ {
			if ss[i].T < began.UnixMilli() {
				continue
			}
			gap := time.Duration(ss[i].T-ss[i-1].T) * time.Millisecond
			if gap > longest {
				longest, longestAt = gap, fmt.Sprintf("%s between %s and %s", tg.addr, msTime(ss[i-1].T), msTime(ss[i].T))
			}
			if gap > gapBound {
				errorf(t, "%s: no sample for %v (between %s and %s), bound %v", tg.addr, gap, msTime(ss[i-1].T), msTime(ss[i].T), gapBound)
			}
		}
	}
	t.Logf("rolling restart: longest per-target gap %v (%s); bound %v", longest, longestAt, gapBound)

	// No staleness marker anywhere: every series only moved.
	all, err := recv.Samples()
	if err != nil {
		fatal(t, err)
	}
	stale := 0
	for key, ss := range all {
		for _, s := range ss {
			if s.IsStale() {
				if stale < 5 {
					errorf(t, "staleness marker on %s at %s", key, msTime(s.T))
				}
				stale++
			}
		}
	}
	if stale > 0 {
		errorf(t, "%d staleness markers on series that only moved", stale)
	}
	vals, err := recv.counterValues()
	if err != nil {
		fatal(t, err)
	}
	holes := 0
	for _, tg := range targets {
		missing, err := missingValues(vals[tg.addr], maxValue(vals[tg.addr]))
		if err != nil {
			errorf(t, "%s: %v", tg.addr, err)
		}
		holes += len(missing)
	}
	t.Logf("counter values never received: %d in total", holes)
	if holes > 0 {
		errorf(t, "%d counter values never reached the receiver", holes)
	}
	recv.checkNoRejections(t)
}

// TestScaleOut adds a fourth replica to three and checks that only the
// targets the newcomer takes move: about a quarter, all to the newcomer.
func TestScaleOut(t *testing.T) {
	needBinary(t)
	targets, recv, nodes, before := shardedSetup(t, 3)

	fourth := newAgent(t, agentSpec{
		name:    "node-4",
		ip:      "127.0.0.4",
		config:  nodes[0].spec.config,
		cluster: true,
	})
	for _, a := range nodes {
		fourth.join = append(fourth.join, a.gossipAddr)
	}
	fourth.start()
	fourth.waitReady(startTimeout)
	all := append(slices.Clone(nodes), fourth)
	after := waitConverged(t, all, targets)

	moved := 0
	for _, tg := range targets {
		from, to := before[tg.addr], after[tg.addr]
		if from == to {
			continue
		}
		moved++
		if to != fourth.spec.name {
			errorf(t, "%s moved from %s to %s: only moves to the new replica are expected", tg.addr, from, to)
		}
	}
	frac := float64(moved) / shardedTargets
	share := math.NaN()
	if pr, err := fourth.peers(); err == nil {
		for _, p := range pr.Data.Peers {
			if p.Self {
				share = p.RingShare
			}
		}
	}
	t.Logf("scale 3→4: %d of %d targets moved (%.3f; ideal 0.25, node-4 ring share %.3f)", moved, shardedTargets, frac, share)
	// The targets' keys depend on their random ports, so the number moved is
	// binomial: 60 draws with p = node-4's ring share (≈ 0.26 for these node
	// names), mean ≈ 16, σ ≈ 3.4. 0.45 (27 targets) is 3.3σ above the mean
	// (a false alarm in about 1 run of 2000), while a ring that reshuffled
	// keys among all nodes would move about three quarters.
	const maxMoved = 0.45
	if frac > maxMoved {
		errorf(t, "moved fraction %.3f > %.2f", frac, maxMoved)
	}
	if moved == 0 {
		errorf(t, "no target moved to the new replica")
	}

	ended := time.Now()
	waitServed(t, targets, ended, 2, convergeTimeout)
	waitReceiverCaughtUp(t, recv, targets, ended)
	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	for inst, g := range byInstance(ups) {
		if len(g) != 1 {
			errorf(t, "%s: %d up series, want 1: %s", inst, len(g), seriesLabels(g))
		}
	}
	if err := checkSeriesClean(ups); err != nil {
		fail(t, err)
	}
	recv.checkNoRejections(t)
}
