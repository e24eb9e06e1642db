package e2e

import (
	"bytes"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Backlog hand-over (docs/handover.md): a replica that leaves while the
// remote end is down hands its unsent samples to a peer, which stores them
// and sends them once the remote end is back; the real TSDB receiver
// refuses out-of-order and duplicate samples, so any misordering shows.

const (
	handoverTargets = 12
	handoverOutage  = 60 * time.Second
)

type handoverScenario struct {
	// killReceiver SIGKILLs the peer that acknowledged the transfer right
	// after the acknowledgement and starts it again.
	killReceiver bool
}

func TestHandoverScaleInDeploymentLosesNothing(t *testing.T) {
	runHandoverScaleIn(t, handoverScenario{})
}

func TestHandoverReceiverKilledAfterAckLosesNothing(t *testing.T) {
	runHandoverScaleIn(t, handoverScenario{killReceiver: true})
}

func handoverArgs() []string {
	return []string{
		"--cluster.terminate-grace=1s",
		"--storage.remote.flush-deadline=1s",
		"--cluster.handover.timeout=60s",
	}
}

func runHandoverScaleIn(t *testing.T, sc handoverScenario) {
	needBinary(t)
	targets := startTargets(t, handoverTargets, 1)
	recv := startGatedReceiver(t)
	cfg := durabilityConfig(t, targetAddrs(targets), recv.writeURL(), "min_backoff: 50ms", "max_backoff: 1s")
	nodes := newClusterAgents(t, 4, cfg, 4)
	for _, a := range nodes {
		a.spec.extraArgs = handoverArgs()
	}
	keepLogs(t, nodes)
	startCluster(t, nodes)
	owners := waitConverged(t, nodes, targets)
	waitServed(t, targets, time.Now(), 2, convergeTimeout)

	recv.status.Store(503)
	t.Logf("remote end down for %v", handoverOutage)
	time.Sleep(handoverOutage) // the outage is the scenario, not a synchronisation

	// The ring may leave a node without targets (12 targets, 4 nodes): the
	// leaver is the node with the most, so that it has a backlog to hand.
	leaver, live := busiestNode(nodes, owners)
	before := servedNow(targets)
	scraped := 0
	for _, v := range before {
		scraped += v
	}
	began := time.Now()
	leaver.stop()
	t.Logf("%s stopped in %v", leaver.spec.name, time.Since(began).Round(time.Millisecond))
	line := logLine(t, leaver, "Backlog handed over")
	if line == "" {
		fatalf(t, "%s: no \"Backlog handed over\" in its log", leaver.spec.name)
	}
	peer := logField(line, "peer")
	t.Logf("transfer: %s", line)
	// Deployment: the leaver's storage goes with the pod.
	if err := os.RemoveAll(leaver.storage); err != nil {
		fatal(t, err)
	}
	waitConverged(t, live, targets)

	if sc.killReceiver {
		var rcv *agent
		for _, a := range live {
			if a.spec.name == peer {
				rcv = a
			}
		}
		if rcv == nil {
			fatalf(t, "the transfer went to %q, not a live node", peer)
		}
		rcv.kill()
		t.Logf("%s SIGKILLed after acknowledging the transfer; starting it again", rcv.spec.name)
		rcv.spec.waitForSize = len(live) // the cluster is scaled in
		rcv.start()
		rcv.waitReady(convergeTimeout)
		waitConverged(t, live, targets)
	}

	recv.status.Store(0)
	t.Logf("remote end back")
	want := servedNow(targets)
	checkCounters(t, recv.testReceiver, targets, want, nil)
	served := 0
	for _, v := range want {
		served += v
	}
	st := recv.Stats()
	t.Logf("counter values scraped before the scale-in: %d (of %d served by the end); receiver: stored=%d out_of_order=%d duplicate=%d too_old=%d exact_duplicates=%d",
		scraped, served, st.Stored, st.OutOfOrder, st.Duplicate, st.TooOld, st.Dropped)
	recv.checkNoRejections(t)
	if st.Dropped != 0 {
		errorf(t, "receiver dropped %d exact duplicates: a sample was sent twice", st.Dropped)
	}
	checkNoFailedSamples(t, live)
	for _, a := range live {
		if v, err := a.metricValue("shoal_handover_prometheus_remote_storage_samples_failed_total", nil); err == nil && v != 0 {
			errorf(t, "%s: %v samples of a backlog taken over failed", a.spec.name, v)
		}
	}
	eventually(t, convergeTimeout, "the backlog taken over is delivered and withdrawn", func() error {
		for _, a := range live {
			v, err := a.metricValue("shoal_handover_pending_backlogs", nil)
			if err != nil {
				return err
			}
			if v != 0 {
				return fmt.Errorf("%s still holds %v backlogs", a.spec.name, v)
			}
		}
		return nil
	})
}

// TestHandoverOfAHoldingLeaverLosesNothing: a replica joins while the
// remote end is down, so it holds the samples of the targets it gains
// until their old owners' last samples are acknowledged, and is scaled in
// (a Deployment: its storage goes) before the remote end comes back. Its
// backlog goes to a peer, which must keep that hold: sent at once, the
// gained targets' newer samples would reach the receiver before the old
// owners' older ones, which it then refuses as out of order.
func TestHandoverOfAHoldingLeaverLosesNothing(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 2*handoverTargets, 1)
	recv := startGatedReceiver(t)
	// Small batches: the old owners' last samples of the moved targets lie
	// several requests deep in their queues, behind the outage, while the
	// backlog's first request holds the joiner's samples of those targets.
	cfg := durabilityConfig(t, targetAddrs(targets), recv.writeURL(), "min_backoff: 50ms", "max_backoff: 1s", "max_samples_per_send: 100")
	nodes := newClusterAgents(t, 3, cfg, 3)
	joiner := newAgent(t, agentSpec{name: "node-4", ip: "127.0.0.4", config: cfg, cluster: true})
	for _, b := range nodes {
		joiner.join = append(joiner.join, b.gossipAddr)
	}
	all := append(slices.Clone(nodes), joiner)
	for _, a := range all {
		a.spec.extraArgs = handoverArgs()
	}
	keepLogs(t, all)
	startCluster(t, nodes)
	waitConverged(t, nodes, targets)
	waitServed(t, targets, time.Now(), 2, convergeTimeout)

	recv.status.Store(503)
	waitServed(t, targets, time.Now(), 5, convergeTimeout) // the old owners' backlog
	joiner.start()
	joiner.waitReady(convergeTimeout)
	owners := waitConverged(t, all, targets)
	if !slices.Contains(slices.Collect(maps.Values(owners)), joiner.spec.name) {
		fatalf(t, "%s gained no target: %v", joiner.spec.name, owners)
	}
	if v, err := joiner.metricValue("shoal_handoff_holds", nil); err != nil || v == 0 {
		fatalf(t, "%s: shoal_handoff_holds = %v (%v), want a hold behind the old owners' unsent samples", joiner.spec.name, v, err)
	}
	waitServed(t, targets, time.Now(), 5, convergeTimeout) // the joiner's held samples

	joiner.stop()
	line := logLine(t, joiner, "Backlog handed over")
	if line == "" {
		fatalf(t, "%s: no \"Backlog handed over\" in its log", joiner.spec.name)
	}
	t.Logf("transfer: %s", line)
	if err := os.RemoveAll(joiner.storage); err != nil {
		fatal(t, err)
	}
	waitConverged(t, nodes, targets)

	recv.status.Store(0)
	t.Logf("remote end back")
	checkEveryValueOnce(t, recv, targets, nodes)
	for _, a := range nodes {
		if v, err := a.metricValue("shoal_handover_prometheus_remote_storage_samples_failed_total", nil); err == nil && v != 0 {
			errorf(t, "%s: %v samples of a backlog taken over failed", a.spec.name, v)
		}
	}
}

// TestHandoverWithoutPeerKeepsBacklogForRestart: the only replica stops
// while the remote end is down, so there is nobody to hand over to: the
// failure is counted and logged, its WAL and progress stay, and the same
// replica started again (a StatefulSet pod coming back) sends everything.
func TestHandoverWithoutPeerKeepsBacklogForRestart(t *testing.T) {
	runHandoverFailure(t, 1, nil, "no_peer")
}

// TestHandoverRefusedByPeerKeepsBacklogForRestart: the only peer takes
// no backlog over 1KB (--cluster.handover.max-bytes), so it refuses the
// transfer (counted on both sides); the leaver keeps its backlog, and the
// peer's hold on the leaver's targets waits for it: started again on its
// storage, the leaver sends it before the peer sends anything newer of
// those targets, so the receiver refuses nothing.
func TestHandoverRefusedByPeerKeepsBacklogForRestart(t *testing.T) {
	runHandoverFailure(t, 2, []string{"--cluster.handover.max-bytes=1KB"}, "too_large")
}

// A StatefulSet pod that handed its backlog over as it stopped, started
// again on the same storage, scrapes the same targets: it stays a viewer
// (not ready, owning nothing) until the peer has delivered that backlog,
// so that its newer samples cannot reach the remote end first.
func TestHandoverRestartOnItsStorageWaitsForThePeersDelivery(t *testing.T) {
	targets, recv, nodes := startBehindRemoteEnd(t, 2, nil)
	a := nodes[0]
	a.stop()
	if logLine(t, a, "Backlog handed over") == "" {
		fatalf(t, "%s handed no backlog over as it stopped", a.spec.name)
	}
	waitConverged(t, nodes[1:], targets)
	a.start()
	const why = "waiting for a peer to deliver the backlog the previous run handed over"
	eventually(t, convergeTimeout, a.spec.name+" waiting for the peer's delivery", func() error {
		if err := a.exitedEarly(); err != nil {
			fatal(t, err)
		}
		resp, err := httpClient.Get(a.url("/-/ready"))
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), why) {
			return fmt.Errorf("/-/ready: %s: %s", resp.Status, bytes.TrimSpace(body))
		}
		return nil
	})
	recv.status.Store(0)
	a.waitReady(convergeTimeout)
	if logLine(t, a, "The backlog the previous run handed over is delivered") == "" {
		errorf(t, "%s became ready without logging the delivery", a.spec.name)
	}
	waitConverged(t, nodes, targets)
	checkEveryValueOnce(t, recv, targets, nodes)
}

// runHandoverFailure runs n replicas (the peers with peerArgs), stops the
// first while the remote end is down, requires its hand-over to fail with
// reason, starts it again on the same storage and checks that every
// counter value served arrives, none refused and none twice.
func runHandoverFailure(t *testing.T, n int, peerArgs []string, reason string) {
	targets, recv, nodes := startBehindRemoteEnd(t, n, peerArgs)
	a := nodes[0]
	began := time.Now()
	a.stop()
	t.Logf("%s stopped in %v", a.spec.name, time.Since(began).Round(time.Millisecond))
	line := logLine(t, a, "Backlog hand-over failed")
	if !strings.Contains(line, "reason="+reason) {
		fatalf(t, "want a hand-over failure with reason %s in the log, got %q", reason, line)
	}
	t.Logf("failure: %s", line)
	for _, p := range nodes[1:] {
		v, err := p.metricValue("shoal_handover_failures_total", map[string]string{"direction": "received", "reason": reason})
		if err != nil || v != 1 {
			errorf(t, "%s: shoal_handover_failures_total{direction=received,reason=%s} = %v (%v), want 1", p.spec.name, reason, v, err)
		}
	}
	if n > 1 {
		waitConverged(t, nodes[1:], targets)
	}
	a.start()
	a.waitReady(convergeTimeout)
	waitConverged(t, nodes, targets)
	recv.status.Store(0)
	checkEveryValueOnce(t, recv, targets, nodes)
}

// startBehindRemoteEnd starts n replicas (the peers with peerArgs) over
// twelve targets, with the remote end down once every target has been
// served 2 times, until they have been served 5 more: the first replica,
// which owns some, then has a backlog to hand over.
func startBehindRemoteEnd(t *testing.T, n int, peerArgs []string) ([]*target, *gatedReceiver, []*agent) {
	t.Helper()
	needBinary(t)
	// Twelve targets: with four, the ring gave the first replica none in
	// one run of eight, and it then had no backlog to hand over.
	targets := startTargets(t, 12, 1)
	recv := startGatedReceiver(t)
	cfg := durabilityConfig(t, targetAddrs(targets), recv.writeURL(), "min_backoff: 50ms", "max_backoff: 1s")
	nodes := newClusterAgents(t, n, cfg, n)
	for i, a := range nodes {
		a.spec.extraArgs = handoverArgs()
		if i > 0 {
			a.spec.extraArgs = append(a.spec.extraArgs, peerArgs...)
		}
	}
	keepLogs(t, nodes)
	startCluster(t, nodes)
	if owners := waitConverged(t, nodes, targets); !slices.Contains(slices.Collect(maps.Values(owners)), nodes[0].spec.name) {
		fatalf(t, "%s owns no target, so it has no backlog to hand over: %v", nodes[0].spec.name, owners)
	}
	waitServed(t, targets, time.Now(), 2, convergeTimeout)
	recv.status.Store(503)
	waitServed(t, targets, time.Now(), 5, convergeTimeout)
	return targets, recv, nodes
}

// checkEveryValueOnce checks that every counter value the targets served
// has arrived, none refused and none sent twice, and that no replica
// counted a failed sample.
func checkEveryValueOnce(t *testing.T, recv *gatedReceiver, targets []*target, nodes []*agent) {
	t.Helper()
	checkCounters(t, recv.testReceiver, targets, servedNow(targets), nil)
	recv.checkNoRejections(t)
	if st := recv.Stats(); st.Dropped != 0 {
		errorf(t, "receiver dropped %d exact duplicates: a sample was sent twice", st.Dropped)
	}
	checkNoFailedSamples(t, nodes)
}

// busiestNode returns the node owning the most targets and the others.
func busiestNode(nodes []*agent, owners ownership) (*agent, []*agent) {
	count := map[string]int{}
	for _, node := range owners {
		count[node]++
	}
	best := 0
	for i, a := range nodes {
		if count[a.spec.name] > count[nodes[best].spec.name] {
			best = i
		}
	}
	rest := slices.Concat(nodes[:best], nodes[best+1:])
	return nodes[best], rest
}

// logLine returns the last line of a's log containing s.
func logLine(t *testing.T, a *agent, s string) string {
	t.Helper()
	b, err := os.ReadFile(a.logPath)
	if err != nil {
		fatal(t, err)
	}
	var found string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			found = l
		}
	}
	return found
}

func logField(line, key string) string {
	m := regexp.MustCompile(`\b` + key + `=("[^"]*"|\S+)`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return strings.Trim(m[1], `"`)
}
