package e2e

import (
	"fmt"
	"testing"
	"time"
)

// Membership tests with a seed-style join list: every replica, the first
// included, joins the first replica's gossip address, and none sets
// --cluster.wait-for-size. The receiver is the real TSDB that refuses
// out-of-order and duplicate samples, the queues run with the default
// queue_config, targets are scraped every second.

// newSeedRun prepares n replicas that all join node-1's address, started by
// the test.
func newSeedRun(t *testing.T, n int) *handoffRun {
	t.Helper()
	h, cfg := newHandoffFixture(t)
	for range n {
		h.addSeedNode(cfg)
	}
	return h
}

// addSeedNode prepares node-<k> joining node-1 only (node-1 itself too).
func (h *handoffRun) addSeedNode(cfg string) *agent {
	k := len(h.nodes) + 1
	a := newAgent(h.t, agentSpec{
		name:    fmt.Sprintf("node-%d", k),
		ip:      fmt.Sprintf("127.0.0.%d", k),
		config:  cfg,
		cluster: true,
	})
	seed := a
	if len(h.nodes) > 0 {
		seed = h.nodes[0]
	}
	a.join = []string{seed.gossipAddr}
	h.nodes = append(h.nodes, a)
	return a
}

// TestSeedJoinRollingRestartAndScaleOut restarts three replicas one after
// the other, the seed first, then adds a fourth. The restarted seed finds
// nobody at its own join address; it must rejoin the peers it remembers
// rather than bootstrap a ring of one and scrape every target while they
// still scrape theirs.
func TestSeedJoinRollingRestartAndScaleOut(t *testing.T) {
	needBinary(t)
	h := newSeedRun(t, 3)
	startCluster(t, h.nodes)
	waitConverged(t, h.nodes, h.targets)
	waitServed(t, h.targets, time.Now(), 2, convergeTimeout)
	h.began = time.Now()

	for _, a := range h.nodes {
		h.stop(a)
		a.start()
		a.waitReady(startTimeout)
		owners := waitConverged(t, h.nodes, h.targets)
		if len(owners.targetsOf(a.spec.name)) == 0 {
			errorf(t, "%s owns nothing after its restart: %s", a.spec.name, owners.summary())
		}
	}
	fourth := h.addSeedNode(h.nodes[0].spec.config)
	fourth.start()
	fourth.waitReady(startTimeout)
	owners := waitConverged(t, h.nodes, h.targets)
	if len(owners.targetsOf(fourth.spec.name)) == 0 {
		errorf(t, "the fourth replica took no target: %s", owners.summary())
	}
	h.finish(true)
}

// TestColdStartWithoutWaitForSize starts four replicas at once, without
// --cluster.wait-for-size: whatever order they find each other in, no
// target is scraped by two of them and the receiver refuses nothing.
func TestColdStartWithoutWaitForSize(t *testing.T) {
	needBinary(t)
	h := newSeedRun(t, 4)
	h.began = time.Now()
	for _, a := range h.nodes {
		a.start()
	}
	for _, a := range h.nodes {
		a.waitReady(startTimeout)
	}
	h.finish(true)
}
