package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// Hand-off tests: real processes with the default queue_config
// (batch_send_deadline 5s) and the default hand-off settings, a real TSDB
// receiver that refuses out-of-order and duplicate samples, and targets of a
// few series at a 1s interval.

const (
	handoffTargets = 30
	handoffLoad    = 3 // gauge series per target besides the counter
	// handoffGapBound is the longest a moved target may go without a sample
	// at the receiver: three scrape intervals, plus scheduling jitter. Every
	// node scrapes a target at the same phase (the scrape offset depends on
	// the target and a seed that is the same for identical hosts and
	// external labels), and a hand-off whose window (fence, gossip, the new
	// owner's start) spans that phase costs one scrape: a target moved twice
	// within a second (a node that restarts quickly, and comes back) can
	// miss two, three intervals between samples.
	handoffGapBound = 3*scrapeInterval + 200*time.Millisecond
)

// handoffRun is one hand-off scenario on a cluster.
type handoffRun struct {
	t       *testing.T
	targets []*target
	recv    *testReceiver
	nodes   []*agent // every node that ran, started or not
	began   time.Time
	// failed sums prometheus_remote_storage_samples_failed_total of nodes
	// read just before they were stopped.
	failed map[string]float64
	// gapBound replaces handoffGapBound when set.
	gapBound time.Duration
	// fencedScrape, when set, is the fewest samples one scrape appends:
	// counter values missing at the receiver are then logged, not failed,
	// up to the scrapes the nodes' fences refused
	// (shoal_handoff_fenced_appends_total over fencedScrape). Such a scrape
	// is a loss the node counts: its loop had not stopped within
	// scrape.StopWait when the unit was fenced, which the bounded
	// placement's moves in quick succession cause on a loaded machine.
	fencedScrape int
	// fenced sums shoal_handoff_fenced_appends_total of stopped nodes.
	fenced float64
	// phaseShift: two scrapes closer than half an interval within
	// [from, to) are logged, not failed: a reload that changes targets'
	// URLs changes their scrape phase (Prometheus hashes the URL into it),
	// so the old loop's last scrape and the new one's first may be close
	// without ever running together.
	phaseShiftFrom, phaseShiftTo time.Time
}

func newHandoffRun(t *testing.T, n int) *handoffRun {
	t.Helper()
	h, cfg := newHandoffFixture(t)
	h.nodes = newClusterAgents(t, n, cfg, n)
	startCluster(t, h.nodes)
	waitConverged(t, h.nodes, h.targets)
	waitServed(t, h.targets, time.Now(), 2, convergeTimeout)
	h.began = time.Now()
	return h
}

// newHandoffFixture starts the targets and the receiver of a hand-off run
// and writes the nodes' configuration; the run has no nodes yet.
func newHandoffFixture(t *testing.T) (*handoffRun, string) {
	t.Helper()
	targets := startTargets(t, handoffTargets, handoffLoad)
	recv := startReceiver(t)
	cfg := writeConfig(t, t.TempDir(), configOpts{
		targets:        targetAddrs(targets),
		fileSD:         true,
		remoteWriteURL: recv.writeURL(),
		defaultQueue:   true,
	})
	return &handoffRun{t: t, targets: targets, recv: recv, failed: map[string]float64{}}, cfg
}

// addNode prepares node-<k> joining every node of the run.
func (h *handoffRun) addNode() *agent {
	k := len(h.nodes) + 1
	a := newAgent(h.t, agentSpec{
		name:    fmt.Sprintf("node-%d", k),
		ip:      fmt.Sprintf("127.0.0.%d", k),
		config:  h.nodes[0].spec.config,
		cluster: true,
	})
	for _, b := range h.nodes {
		a.join = append(a.join, b.gossipAddr)
	}
	h.nodes = append(h.nodes, a)
	return a
}

func (h *handoffRun) running() []*agent {
	var out []*agent
	for _, a := range h.nodes {
		if a.running() {
			out = append(out, a)
		}
	}
	return out
}

// stop stops a gracefully (SIGTERM), recording its failed samples first.
func (h *handoffRun) stop(a *agent) {
	h.t.Helper()
	if v, err := a.metricValue("prometheus_remote_storage_samples_failed_total", nil); err == nil {
		h.failed[a.spec.name] += v
	}
	if v, err := a.metricValue("shoal_handoff_fenced_appends_total", nil); err == nil {
		h.fenced += v
	}
	logHandoffMetrics(h.t, a)
	a.stop()
}

// finish waits until the receiver has everything up to now and asserts the
// hand-off guarantees; it returns the longest per-target gap.
func (h *handoffRun) finish(checkValues bool) time.Duration {
	t := h.t
	t.Helper()
	live := h.running()
	waitConverged(t, live, h.targets)
	ended := time.Now()
	waitServed(t, h.targets, ended, 2, convergeTimeout)
	waitReceiverCaughtUp(t, h.recv, h.targets, ended)

	h.recv.checkNoRejections(t)
	if st := h.recv.Stats(); st.Dropped != 0 {
		errorf(t, "receiver dropped %d exact duplicates: a sample was sent twice", st.Dropped)
	}
	for _, a := range live {
		logHandoffMetrics(t, a)
	}
	checkNoFailedSamples(t, live)
	for name, v := range h.failed {
		if v != 0 {
			errorf(t, "%s: prometheus_remote_storage_samples_failed_total = %v before it stopped, want 0", name, v)
		}
	}

	// One series per target, no staleness marker, bounded gaps.
	ups, err := h.recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	if err := checkSeriesClean(ups); err != nil {
		fail(t, err)
	}
	upBy := byInstance(ups)
	var longest time.Duration
	var longestAt string
	for _, tg := range h.targets {
		g := upBy[tg.addr]
		if len(g) != 1 {
			errorf(t, "%s: %d up series, want 1: %s", tg.addr, len(g), seriesLabels(g))
			continue
		}
		ss := g[0].samples
		for i := 1; i < len(ss); i++ {
			if ss[i].T < h.began.UnixMilli() {
				continue
			}
			gap := time.Duration(ss[i].T-ss[i-1].T) * time.Millisecond
			if gap > longest {
				longest, longestAt = gap, fmt.Sprintf("%s between %s and %s", tg.addr, msTime(ss[i-1].T), msTime(ss[i].T))
			}
		}
	}
	bound := handoffGapBound
	if h.gapBound > 0 {
		bound = h.gapBound
	}
	t.Logf("longest per-target gap %v (%s); bound %v", longest, longestAt, bound)
	if longest > bound {
		errorf(t, "a target went %v without a sample (%s); bound %v", longest, longestAt, bound)
	}

	// Never scraped by two nodes at once: two scrapes of a target closer
	// than half an interval over two connections mean two scrapers. Over
	// one connection it is one loop whose tick came late (a starved
	// process; see scrapers_test.go): logged, not an error.
	for _, tg := range h.targets {
		tg.mu.Lock()
		served := slices.Clone(tg.served)
		tg.mu.Unlock()
		for i := 1; i < len(served); i++ {
			if served[i].Before(h.began) {
				continue
			}
			d := served[i].Sub(served[i-1])
			if d >= scrapeInterval/2 {
				continue
			}
			c1, who1 := tg.scrapeBy(i - 1)
			c2, who2 := tg.scrapeBy(i)
			if !served[i].Before(h.phaseShiftFrom) && served[i].Before(h.phaseShiftTo) {
				t.Logf("%s scraped twice within %v at %s by %q and %q while the reload shifted scrape phases", tg.addr, d.Round(time.Millisecond), served[i].Format("15:04:05.000"), who1, who2)
				continue
			}
			if c1 == c2 && c1 != "" {
				t.Logf("%s scraped twice within %v at %s over one connection (%s): one late scrape, not two scrapers", tg.addr, d.Round(time.Millisecond), served[i].Format("15:04:05.000"), who1)
				continue
			}
			errorf(t, "%s scraped twice within %v at %s: by %q over %s and %q over %s", tg.addr, d.Round(time.Millisecond), served[i].Format("15:04:05.000"), who1, c1, who2, c2)
			break
		}
	}

	byWho := map[string]int{}
	for _, tg := range h.targets {
		tg.mu.Lock()
		for _, c := range tg.from {
			byWho[tg.conns[c]]++
		}
		tg.mu.Unlock()
	}
	t.Logf("scrapes by process (\"\": not told): %v", byWho)

	if checkValues {
		h.checkCounterValues(live)
	}
	return longest
}

// checkNoFailedSamples asserts prometheus_remote_storage_samples_failed_total
// is 0 on every node.
func checkNoFailedSamples(t *testing.T, nodes []*agent) {
	t.Helper()
	for _, a := range nodes {
		if !a.running() {
			continue
		}
		v, err := a.metricValue("prometheus_remote_storage_samples_failed_total", nil)
		if err != nil {
			errorf(t, "%s: %v", a.spec.name, err)
			continue
		}
		if v != 0 {
			errorf(t, "%s: prometheus_remote_storage_samples_failed_total = %v, want 0", a.spec.name, v)
		}
	}
}

// logHandoffMetrics logs a node's hand-off figures: holds, their typical
// duration, and the bounds that were hit.
func logHandoffMetrics(t *testing.T, a *agent) {
	t.Helper()
	mfs, err := a.metrics()
	if err != nil {
		return
	}
	var parts []string
	if mf, ok := mfs["shoal_handoff_hold_duration_seconds"]; ok && len(mf.GetMetric()) == 1 {
		hs := mf.GetMetric()[0].GetHistogram()
		if n := hs.GetSampleCount(); n > 0 {
			parts = append(parts, fmt.Sprintf("holds=%d mean=%v median≤%s", n,
				time.Duration(hs.GetSampleSum()/float64(n)*float64(time.Second)).Round(time.Millisecond), quantileBucket(hs, 0.5)))
		}
	}
	for _, name := range []string{"shoal_handoff_hold_timeouts_total", "shoal_handoff_delay_expired_total", "shoal_handoff_fenced_appends_total", "shoal_handoff_fenced_sequence", "shoal_handoff_acked_sequence"} {
		if v, err := testutil.Value(mfs, name, nil); err == nil {
			parts = append(parts, fmt.Sprintf("%s=%v", strings.TrimPrefix(name, "shoal_handoff_"), v))
		}
	}
	t.Logf("%s hand-off: %s", a.spec.name, strings.Join(parts, " "))
}

func quantileBucket(h *dto.Histogram, q float64) string {
	want := uint64(q * float64(h.GetSampleCount()))
	for _, b := range h.GetBucket() {
		if b.GetCumulativeCount() >= want && b.GetCumulativeCount() > 0 {
			return fmt.Sprint(time.Duration(b.GetUpperBound() * float64(time.Second)))
		}
	}
	return "+Inf"
}

// TestHandoffRollingRestart restarts three replicas one after the other.
func TestHandoffRollingRestart(t *testing.T) {
	needBinary(t)
	h := newHandoffRun(t, 3)
	for _, a := range h.nodes {
		h.stop(a)
		a.start()
		a.waitReady(startTimeout)
		owners := waitConverged(t, h.nodes, h.targets)
		if len(owners.targetsOf(a.spec.name)) == 0 {
			errorf(t, "%s owns nothing after its restart: %s", a.spec.name, owners.summary())
		}
	}
	h.finish(true)
}

// TestHandoffScaleOutAndIn adds a fourth replica to three, then removes it.
func TestHandoffScaleOutAndIn(t *testing.T) {
	needBinary(t)
	h := newHandoffRun(t, 3)
	fourth := h.addNode()
	fourth.start()
	fourth.waitReady(startTimeout)
	after := waitConverged(t, h.nodes, h.targets)
	if len(after.targetsOf(fourth.spec.name)) == 0 {
		fatalf(t, "the fourth node took no target: %s", after.summary())
	}
	waitServed(t, h.targets, time.Now(), 3, convergeTimeout)
	h.stop(fourth)
	h.finish(true)
}

// TestHandoffSIGKILL kills a node that holds targets: the survivors take
// over within failure detection + hand-off delay + two intervals, and the
// receiver refuses nothing.
func TestHandoffSIGKILL(t *testing.T) {
	needBinary(t)
	h := newHandoffRun(t, 3)
	owners, err := snapshotOwnership(h.nodes, h.targets)
	if err != nil {
		fatal(t, err)
	}
	victim := h.nodes[1]
	orphans := owners.targetsOf(victim.spec.name)
	if len(orphans) == 0 {
		fatalf(t, "%s owns nothing: %s", victim.spec.name, owners.summary())
	}
	killed, covered := killAndAwaitCoverage(t, victim, orphans, h.targets)
	bound := failureDetection + handoffDelay + 2*scrapeInterval
	if covered > bound {
		errorf(t, "coverage back after %v, bound failure detection + hand-off delay + 2 intervals = %v", covered, bound)
	}
	// The killed node's unsent samples stay in its WAL: values may be missing
	// until it comes back; ordering and one series per target still hold.
	h.began = killed.Add(bound)
	h.finish(false)
}

// TestHandoffRemoteDownAcrossScaleOut keeps the receiver down (503) for 30s
// while a fourth replica joins, then brings it back: the new owner's samples
// wait for the old owners' backlog, so nothing is refused and nothing lost.
func TestHandoffRemoteDownAcrossScaleOut(t *testing.T) {
	needBinary(t)
	h := newHandoffRun(t, 3)
	h.recv.unavailable.Store(true)
	down := time.Now()
	fourth := h.addNode()
	fourth.start()
	fourth.waitReady(startTimeout)
	after := waitConverged(t, h.nodes, h.targets)
	if len(after.targetsOf(fourth.spec.name)) == 0 {
		fatalf(t, "the fourth node took no target: %s", after.summary())
	}
	if d := 30*time.Second - time.Since(down); d > 0 {
		time.Sleep(d) // the outage itself, not a synchronisation
	}
	if holds, err := fourth.metricValue("shoal_handoff_holds", nil); err != nil || holds == 0 {
		errorf(t, "the new owner holds no remote-write queue during the outage (holds=%v, err=%v)", holds, err)
	}
	h.recv.unavailable.Store(false)
	t.Logf("receiver down for %v; %d writes refused with 503", time.Since(down).Round(time.Second), h.recv.refused.Load())
	h.finish(true)
}

// checkCounterValues asserts that every counter value a target served
// reached the receiver, except (with fencedScrape) as many as the fences
// counted refused scrapes.
func (h *handoffRun) checkCounterValues(live []*agent) {
	t := h.t
	t.Helper()
	vals, err := h.recv.counterValues()
	if err != nil {
		fatal(t, err)
	}
	allowed, fenced := 0, h.fenced
	if h.fencedScrape > 0 {
		for _, a := range live {
			if v, err := a.metricValue("shoal_handoff_fenced_appends_total", nil); err == nil {
				fenced += v
			}
		}
		allowed = int(fenced) / h.fencedScrape
	}
	holes := 0
	var report []string
	for _, tg := range h.targets {
		missing, err := missingValues(vals[tg.addr], maxValue(vals[tg.addr]))
		if err != nil {
			errorf(t, "%s: %v", tg.addr, err)
		}
		if len(missing) > 0 {
			holes += len(missing)
			report = append(report, fmt.Sprintf("%s: counter values %v never reached the receiver", tg.addr, missing))
		}
	}
	t.Logf("counter values missing at the receiver: %d (scrapes refused by the fences: at most %d, %v samples)", holes, allowed, fenced)
	for _, r := range report {
		if holes <= allowed {
			t.Logf("%s (refused by a fence, counted)", r)
		} else {
			errorf(t, "%s", r)
		}
	}
}
