package cluster

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/internal/testutil"
)

func TestReadyAtOnceWithoutWaitForSize(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ListenAddr = "127.0.0.1:0"
	n, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !n.Ready() {
		t.Fatal("not ready with wait-for-size 0")
	}
	if err := n.WaitReady(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// Ready stays false until WaitForSize participants (self included) are
// seen; viewers do not count.
func TestWaitForSizeHoldsUntilMet(t *testing.T) {
	tn := newTestNet(t)
	cfg := testConfig(tn, 1)
	cfg.WaitForSize = 3
	cfg.WaitTimeout = time.Hour
	first := startNode(t, cfg)
	if got := promtestutil.ToFloat64(first.metrics.minimumSize); got != 3 {
		t.Errorf("cluster_minimum_size = %v", got)
	}
	join := func(i int, state State) testNode {
		c := testConfig(tn, i)
		c.Join = []string{tn.addr(1)}
		n, err := New(c, testLogger(t, c.NodeName), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		if err := n.SetState(state); err != nil {
			t.Fatal(err)
		}
		if err := n.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Shutdown() })
		return testNode{Node: n}
	}
	// Two members, and a third that is already terminating: it does not count.
	second, third := join(2, Viewer), join(3, Terminating)
	testutil.Eventually(t, 10*time.Second, "two viewers and a terminating node",
		converged([]testNode{first, second, third}, "node-01=viewer,node-02=viewer,node-03=terminating"))
	if first.Ready() {
		t.Fatal("ready with 2 of 3 members (the third is terminating)")
	}
	if got := promtestutil.ToFloat64(first.metrics.ready); got != 0 {
		t.Errorf("cluster_ready_for_traffic = %v before the size is met", got)
	}

	// A viewer counts: nodes stay viewers, off the ring, until they are ready.
	fourth := join(4, Viewer)
	if err := first.WaitReady(waitCtx(t, 10*time.Second)); err != nil {
		t.Fatalf("not ready with three viewers: %v", err)
	}
	if !first.Ready() || promtestutil.ToFloat64(first.metrics.ready) != 1 {
		t.Error("Ready or cluster_ready_for_traffic not set")
	}
	// Once ready, it stays ready when the cluster shrinks.
	for _, n := range []testNode{second, third, fourth} {
		n.Leave(time.Second)
		n.Shutdown()
	}
	testutil.Eventually(t, 15*time.Second, "alone again", converged([]testNode{first}, "node-01=viewer"))
	if !first.Ready() {
		t.Error("ready was withdrawn after the cluster shrank")
	}
}

// An unmet size gives way to the timeout: never ready before it, always
// ready after it.
func TestWaitForSizeTimesOut(t *testing.T) {
	tn := newTestNet(t)
	cfg := testConfig(tn, 1)
	cfg.WaitForSize = 5
	cfg.WaitTimeout = 500 * time.Millisecond
	n, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.SetState(Participant)
	if n.Ready() {
		t.Fatal("ready before Start")
	}
	started := time.Now()
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	if err := n.WaitReady(waitCtx(t, 30*time.Second)); err != nil {
		t.Fatalf("still not ready long after the timeout: %v", err)
	}
	if waited := time.Since(started); waited < cfg.WaitTimeout {
		t.Errorf("ready after %s, before the %s timeout, with 1 of 5 members", waited, cfg.WaitTimeout)
	}
}

func TestSubscribeCoalescesABurst(t *testing.T) {
	tn := newTestNet(t)
	n, err := New(testConfig(tn, 1), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, cancel := n.Subscribe()
	other, cancelOther := n.Subscribe()
	defer cancelOther()
	for _, s := range []State{Participant, Viewer, Participant, Terminating} {
		if err := n.SetState(s); err != nil {
			t.Fatal(err)
		}
	}
	if len(ch) != 1 || len(other) != 1 {
		t.Fatalf("pending signals after a burst of 4 changes: %d and %d, want 1 each", len(ch), len(other))
	}
	<-ch
	if len(ch) != 0 {
		t.Fatal("a second signal was pending")
	}
	if got := n.Self().State; got != Terminating {
		t.Errorf("state after the burst = %s", got)
	}
	if err := n.SetState(Participant); err == nil {
		t.Error("left terminating")
	}
	cancel()
	cancel() // idempotent
	<-other
	n.notify()
	if len(ch) != 0 {
		t.Error("signal after unsubscribe")
	}
	if len(other) != 1 {
		t.Error("remaining subscriber missed a signal")
	}
}

// Membership changes signal subscribers too.
func TestSubscribeSignalsMembershipChanges(t *testing.T) {
	tn := newTestNet(t)
	first := startNode(t, testConfig(tn, 1))
	ch, cancel := first.Subscribe()
	defer cancel()

	cfg := testConfig(tn, 2)
	cfg.Join = []string{tn.addr(1)}
	second := startNode(t, cfg)
	second.SetState(Participant)
	deadline := time.After(10 * time.Second)
	for view(first.Node) != "node-01=viewer,node-02=participant" {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no signal brought the new member; view %s", view(first.Node))
		}
	}
}
