package e2e

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/internal/testutil"
	"github.com/shoal-dev/shoal/placement"
	"github.com/shoal-dev/shoal/ring"
	"github.com/shoal-dev/shoal/scrape"
)

// Load-aware placement (--cluster.placement=bounded) on real processes:
// skewed real targets, a few of them 50× larger than the rest.

const (
	// Samples one scrape of a target appends: its counter, its load series
	// and Prometheus' five report series (up, scrape_duration_seconds,
	// scrape_samples_scraped, scrape_samples_post_metric_relabeling,
	// scrape_series_added).
	reportSeries = 5
	smallLoad    = 3 // 9 samples per scrape
	largeLoad    = 50*(1+smallLoad+reportSeries) - 1 - reportSeries
	smallTargets = 80
	largeTargets = 3
	// loadBound is the bounded-load placement's promise for max/mean
	// samples/s per node, ring.DefaultLoadBound (1.10), which holds for
	// any N as long as the largest target fits under the limit: here a
	// large target is 450 samples/s against a limit of 1.10 × 2070/4 ≈ 569.
	// The weights are exact (every scrape appends the same number of
	// samples), so the slack is only float32 rounding.
	loadBound = ring.DefaultLoadBound + 0.005
	// weightsTimeout bounds how long the first publication takes: 10
	// scrapes (WeightPolicy.MinSamples) and a publication period (10s),
	// then gossip and hand-off; generous for the shared CI machine.
	weightsTimeout = 2 * convergeTimeout
)

func samplesPerScrape(load int) int { return 1 + load + reportSeries }

// placementPeer is the part of /api/v1/cluster/peers this test reads.
type placementPeer struct {
	Name                    string  `json:"name"`
	State                   string  `json:"state"`
	Placement               string  `json:"placement"`
	PlacementLoad           float64 `json:"placementLoad"`
	PlacementLimit          float64 `json:"placementLimit"`
	SamplesPerSecond        float64 `json:"samplesPerSecond"`
	WeighedSamplesPerSecond float64 `json:"weighedSamplesPerSecond"`
}

type placementPeersResponse struct {
	Status string `json:"status"`
	Data   struct {
		Peers []placementPeer `json:"peers"`
	} `json:"data"`
}

// loadSpread is the samples/s each node appends under ownership o (from
// the targets' known sizes) and max/mean over the nodes.
func loadSpread(o ownership, nodes []*agent, size map[string]int) (map[string]float64, float64) {
	per := map[string]float64{}
	for _, a := range nodes {
		per[a.spec.name] = 0
	}
	total := 0.0
	for inst, n := range o {
		v := float64(size[inst]) / scrapeInterval.Seconds()
		per[n] += v
		total += v
	}
	mx := 0.0
	for _, v := range per {
		mx = max(mx, v)
	}
	return per, mx / (total / float64(len(per)))
}

// ringSpread is what plain consistent hashing would give for the same
// targets and nodes: the reason for the bounded mode.
func ringSpread(targets []*target, nodes []*agent, size map[string]int) float64 {
	var names []string
	for _, a := range nodes {
		names = append(names, a.spec.name)
	}
	r := ring.New(names, 0)
	o := ownership{}
	for _, tg := range targets {
		o[tg.addr] = r.Primary(scrape.TargetKeyString("e2e", "http://"+tg.addr+"/metrics"))
	}
	_, s := loadSpread(o, nodes, size)
	return s
}

// waitBalanced polls until every node places every target with a published
// weight, all agree on each node's placed load, the cluster has converged,
// and the samples/s spread is within loadBound. It returns the spread.
func waitBalanced(t *testing.T, nodes []*agent, targets []*target, size map[string]int) float64 {
	t.Helper()
	total := 0.0
	for _, n := range size {
		total += float64(n) / scrapeInterval.Seconds()
	}
	var (
		spread float64
		per    map[string]float64
	)
	start := time.Now()
	testutil.Eventually(t, weightsTimeout, "bounded placement converged and balanced", func() error {
		var first []placementPeer
		for _, a := range nodes {
			placed, err := a.metricValue("shoal_placement_weights_placed", nil)
			if err != nil {
				return err
			}
			if int(placed) != len(targets) {
				return fmt.Errorf("%s places %v published weights, want %d", a.spec.name, placed, len(targets))
			}
			var r placementPeersResponse
			if err := a.getJSON("/api/v1/cluster/peers", &r); err != nil {
				return err
			}
			ps := r.Data.Peers
			slices.SortFunc(ps, func(x, y placementPeer) int { return strings.Compare(x.Name, y.Name) })
			for _, p := range ps {
				if p.Placement != "bounded" || p.PlacementLimit == 0 {
					return fmt.Errorf("%s reports placement %q, limit %v for %s", a.spec.name, p.Placement, p.PlacementLimit, p.Name)
				}
			}
			if first == nil {
				first = ps
			} else if !slices.EqualFunc(first, ps, func(x, y placementPeer) bool {
				return x.Name == y.Name && x.PlacementLoad == y.PlacementLoad && x.PlacementLimit == y.PlacementLimit
			}) {
				return fmt.Errorf("%s and %s place different loads: %+v vs %+v", nodes[0].spec.name, a.spec.name, first, ps)
			}
		}
		// The limit is 1.10 × the mean of what the targets really append:
		// the published weights are the measured samples/s.
		if want := ring.DefaultLoadBound * total / float64(len(nodes)); first[0].PlacementLimit < want*0.99 || first[0].PlacementLimit > want*1.01 {
			return fmt.Errorf("limit %.1f, want 1.10 × mean samples/s = %.1f", first[0].PlacementLimit, want)
		}
		o, err := snapshotOwnership(nodes, targets)
		if err != nil {
			return err
		}
		per, spread = loadSpread(o, nodes, size)
		if spread > loadBound {
			return fmt.Errorf("samples/s per node %v: max/mean %.3f, bound %.3f", per, spread, loadBound)
		}
		return nil
	})
	t.Logf("balanced after %v: samples/s per node %v, max/mean %.3f (bound %.2f; plain ring for these targets: %.3f)",
		time.Since(start).Round(time.Second), per, spread, loadBound, ringSpread(targets, nodes, size))
	return spread
}

// waitWeightsPlaced polls until every node places a published weight for
// each of the count targets.
func waitWeightsPlaced(t *testing.T, nodes []*agent, count int) {
	t.Helper()
	testutil.Eventually(t, weightsTimeout, "every target placed by its published weight", func() error {
		for _, a := range nodes {
			placed, err := a.metricValue("shoal_placement_weights_placed", nil)
			if err != nil {
				return err
			}
			if int(placed) != count {
				return fmt.Errorf("%s places %v published weights, want %d", a.spec.name, placed, count)
			}
		}
		return nil
	})
}

// targetsMovedIn is the cluster's shoal_targets_moved_total{direction="in"}:
// every move of a discovered target is a gain on some node.
func targetsMovedIn(nodes []*agent) (float64, error) {
	moved := 0.0
	for _, a := range nodes {
		v, err := a.metricValue("shoal_targets_moved_total", map[string]string{"direction": "in"})
		if err != nil {
			return 0, err
		}
		moved += v
	}
	return moved, nil
}

// waitPlacementSettled returns at once unless the cluster places with
// bounded loads; then it polls until every target is placed by its
// published weight and no target has moved for two publication periods.
// The first weights move targets off the plain ring (the placement before
// any weight is published), so a test that asserts nothing moves starts
// from here.
func waitPlacementSettled(t *testing.T, nodes []*agent, targets []*target) {
	t.Helper()
	var r placementPeersResponse
	if err := nodes[0].getJSON("/api/v1/cluster/peers", &r); err != nil {
		fatal(t, err)
	}
	if len(r.Data.Peers) == 0 || r.Data.Peers[0].Placement != "bounded" {
		return
	}
	waitWeightsPlaced(t, nodes, len(targets))
	last, since := -1.0, time.Now()
	start := time.Now()
	quietFor := 2 * placement.DefaultWeightPeriod
	testutil.Eventually(t, weightsTimeout+quietFor, "no target moved by the weights for two publication periods", func() error {
		moved, err := targetsMovedIn(nodes)
		if err != nil {
			return err
		}
		if moved != last {
			last, since = moved, time.Now()
		}
		if quiet := time.Since(since); quiet < quietFor {
			return fmt.Errorf("%v moves so far, the last %v ago", moved, quiet.Round(time.Second))
		}
		return nil
	})
	t.Logf("bounded placement settled after %v", time.Since(start).Round(time.Second))
}

// startBounded starts 4 nodes with --cluster.placement=bounded over 80
// targets of 9 samples per scrape and 3 of 450, and waits until the owners'
// published weights balance them.
func startBounded(t *testing.T) (*handoffRun, []*target, map[string]int) {
	t.Helper()
	needBinary(t)
	small := startTargets(t, smallTargets, smallLoad)
	large := startTargets(t, largeTargets, largeLoad)
	targets := append(slices.Clone(small), large...)
	size := map[string]int{}
	for _, tg := range targets {
		size[tg.addr] = samplesPerScrape(tg.load)
	}
	recv := startReceiver(t)
	cfg := writeConfig(t, t.TempDir(), configOpts{
		targets:        targetAddrs(targets),
		fileSD:         true,
		remoteWriteURL: recv.writeURL(),
		defaultQueue:   true,
	})
	nodes := newClusterAgents(t, 4, cfg, 4)
	for _, a := range nodes {
		a.spec.extraArgs = append(a.spec.extraArgs, "--cluster.placement=bounded")
	}
	keepLogs(t, nodes)
	startCluster(t, nodes)
	waitConverged(t, nodes, targets)
	began := time.Now()
	waitServed(t, targets, began, 2, convergeTimeout)
	h := &handoffRun{t: t, targets: targets, recv: recv, nodes: nodes, began: began, failed: map[string]float64{}}
	waitBalanced(t, nodes, targets, size)
	moved, err := targetsMovedIn(nodes)
	if err != nil {
		fatal(t, err)
	}
	t.Logf("targets moved by the published weights: %v", moved)
	return h, targets, size
}

// TestPlacementBoundedBalance: once the owners have published their
// targets' weights, the samples/s per node are within the bound, and the
// weight-driven moves hand targets off with no gap over the hand-off bound,
// nothing scraped twice and no refusal at the receiver.
func TestPlacementBoundedBalance(t *testing.T) {
	h, _, _ := startBounded(t)
	h.finish(true)
}

// TestPlacementBoundedRollingRestart: a rolling restart under the bounded
// placement keeps the balance and the hand-off guarantees: nothing refused
// or missing at the receiver, no target scraped twice, no gap over the
// hand-off bound. What made it fail before (issue 11): a restarted node's
// first weights send was dropped by peers that had not heard of its join
// yet, so they placed another generation until the next push/pull, and a
// gained target then started on the hand-off delay while its old owner
// still scraped it. Now the weights are kept (cluster), and gained targets
// wait past the delay while a participating peer follows another
// generation (placement.Coordinator.Contested).
func TestPlacementBoundedRollingRestart(t *testing.T) {
	h, targets, size := startBounded(t)
	for _, a := range h.nodes {
		h.stop(a)
		a.start()
		a.waitReady(startTimeout)
		waitConverged(t, h.nodes, targets)
	}
	waitBalanced(t, h.nodes, targets, size)
	for _, a := range h.nodes {
		var vs []string
		for _, m := range []string{"shoal_handoff_contested_total", "shoal_handoff_contest_timeouts_total", "shoal_handoff_hold_timeouts_total"} {
			v, err := a.metricValue(m, nil)
			if err != nil {
				fatal(t, err)
			}
			vs = append(vs, fmt.Sprintf("%s=%v", strings.TrimPrefix(m, "shoal_handoff_"), v))
		}
		t.Logf("%s since its restart: %s", a.spec.name, strings.Join(vs, " "))
		checkWeightsTravelAsDeltas(t, a)
	}
	h.finish(true)
}

// TestPlacementBoundedScaleOutAndIn: a fifth node joins the balanced
// cluster, the placement balances the five (its share filled by the
// weights the others published), then it leaves: every hand-off holds the
// guarantees, nothing refused at the receiver, nothing missing but what a
// fence counted (the join's weights in flux can move a target out of a
// node and back within 100 ms; see handoffRun.fencedScrape).
func TestPlacementBoundedScaleOutAndIn(t *testing.T) {
	h, targets, size := startBounded(t)
	h.fencedScrape = samplesPerScrape(smallLoad)
	fifth := h.addNode()
	fifth.spec.extraArgs = append(fifth.spec.extraArgs, "--cluster.placement=bounded")
	fifth.start()
	fifth.waitReady(startTimeout)
	waitConverged(t, h.nodes, targets)
	waitBalanced(t, h.nodes, targets, size)
	if o, err := snapshotOwnership(h.nodes, targets); err != nil {
		fatal(t, err)
	} else if len(o.targetsOf(fifth.spec.name)) == 0 {
		fatalf(t, "the fifth node took no target: %s", o.summary())
	}
	h.stop(fifth)
	waitBalanced(t, h.running(), targets, size)
	h.finish(true)
}

// TestPlacementBoundedSIGKILL kills a node of the balanced cluster: the
// survivors take its targets over within failure detection + hand-off
// delay + two intervals (its weights stay placed until the new owners
// publish them), balance again, and the receiver refuses nothing.
func TestPlacementBoundedSIGKILL(t *testing.T) {
	h, targets, size := startBounded(t)
	owners, err := snapshotOwnership(h.nodes, targets)
	if err != nil {
		fatal(t, err)
	}
	victim := h.nodes[1]
	orphans := owners.targetsOf(victim.spec.name)
	if len(orphans) == 0 {
		fatalf(t, "%s owns nothing: %s", victim.spec.name, owners.summary())
	}
	killed, covered := killAndAwaitCoverage(t, victim, orphans, targets)
	bound := failureDetection + handoffDelay + 2*scrapeInterval
	if covered > bound {
		errorf(t, "coverage back after %v, bound failure detection + hand-off delay + 2 intervals = %v", covered, bound)
	}
	waitBalanced(t, h.running(), targets, size)
	// The killed node's unsent samples stay in its WAL: values may be
	// missing until it comes back; ordering and one series per target hold.
	h.began = killed.Add(bound)
	h.finish(false)
}

// checkWeightsTravelAsDeltas: between nodes of one version, weight changes
// travel as deltas, never as whole sets, and every message is readable.
func checkWeightsTravelAsDeltas(t *testing.T, a *agent) {
	t.Helper()
	for _, c := range []struct {
		name   string
		labels map[string]string
		ok     func(float64) bool
	}{
		{"shoal_cluster_weights_sent_bytes_total", map[string]string{"kind": "delta"}, func(v float64) bool { return v > 0 }},
		{"shoal_cluster_weights_sent_bytes_total", map[string]string{"kind": "set"}, func(v float64) bool { return v == 0 }},
		{"shoal_cluster_bad_peer_weights_total", nil, func(v float64) bool { return v == 0 }},
	} {
		v, err := a.metricValue(c.name, c.labels)
		if err != nil {
			fatal(t, err)
		}
		if !c.ok(v) {
			t.Errorf("%s: %s%v = %v", a.spec.name, c.name, c.labels, v)
		}
	}
}

// keepLogs, with $SHOAL_E2E_KEEP_LOGS set, runs the nodes at debug level
// and copies their whole logs to $SHOAL_E2E_KEEP_LOGS/<test> when the test
// ends: a hand-off failure is found in the order of placement generations
// across the nodes ("New bounded-load placement"), which the tail printed
// on failure does not show.
func keepLogs(t *testing.T, nodes []*agent) {
	dir := os.Getenv("SHOAL_E2E_KEEP_LOGS")
	if dir == "" {
		return
	}
	for _, a := range nodes {
		a.spec.extraArgs = append(a.spec.extraArgs, "--log.level=debug")
	}
	t.Cleanup(func() {
		d := filepath.Join(dir, t.Name())
		_ = os.MkdirAll(d, 0o755)
		for _, a := range nodes {
			a.killIfRunning()
			in, err := os.Open(a.logPath)
			if err != nil {
				continue
			}
			out, _ := os.Create(filepath.Join(d, a.spec.name+".log"))
			_, _ = io.Copy(out, in)
			in.Close()
			out.Close()
		}
	})
}
