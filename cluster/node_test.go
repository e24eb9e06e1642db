package cluster

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// startStatic starts count nodes of tn; nodes 2..count join node 1 by its
// address. mutate, if set, adjusts each config.
func startStatic(t *testing.T, tn testNet, count int, mutate func(*Config)) []testNode {
	t.Helper()
	var nodes []testNode
	for i := 1; i <= count; i++ {
		cfg := testConfig(tn, i)
		if i > 1 {
			cfg.Join = []string{tn.addr(1)}
		}
		if mutate != nil {
			mutate(&cfg)
		}
		nodes = append(nodes, startNode(t, cfg))
	}
	return nodes
}

func allStates(nodes []testNode, s State) map[string]State {
	m := map[string]State{}
	for _, n := range nodes {
		m[n.cfg.NodeName] = s
	}
	return m
}

func TestFiveNodesConverge(t *testing.T) {
	tn := newTestNet(t)
	nodes := startStatic(t, tn, 5, nil)
	testutil.Eventually(t, 15*time.Second, "all see five viewers", converged(nodes, expectView(allStates(nodes, Viewer))))

	for _, n := range nodes {
		if err := n.SetState(Participant); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 15*time.Second, "all see five participants", converged(nodes, expectView(allStates(nodes, Participant))))

	// Metadata travels with the state.
	for _, n := range nodes {
		for _, p := range n.Peers() {
			i := 0
			fmt.Sscanf(p.Name, "node-%02d", &i)
			if p.Addr != tn.addr(i) {
				t.Errorf("%s sees %s at %s, want %s", n.cfg.NodeName, p.Name, p.Addr, tn.addr(i))
			}
			if want := tn.ip(i) + ":9940"; p.HTTPAddr != want {
				t.Errorf("%s sees %s with HTTP address %q, want %q", n.cfg.NodeName, p.Name, p.HTTPAddr, want)
			}
			if p.Self != (p.Name == n.cfg.NodeName) {
				t.Errorf("%s: Self flag of %s is %v", n.cfg.NodeName, p.Name, p.Self)
			}
			if d := p.StartTime.Sub(nodes[i-1].startTime); d < -time.Millisecond || d > time.Millisecond {
				t.Errorf("%s sees start time %s for %s, want %s", n.cfg.NodeName, p.StartTime, p.Name, nodes[i-1].startTime)
			}
		}
	}

	// Metrics of one node.
	n := nodes[0]
	if got := promtestutil.CollectAndCount(n.metrics.info); got != 1 {
		t.Errorf("cluster_node_info has %d series, want 1", got)
	}
	if got := promtestutil.ToFloat64(n.metrics.info.WithLabelValues("participant")); got != 1 {
		t.Errorf("cluster_node_info{state=participant} = %v", got)
	}
	if got := promtestutil.ToFloat64(n.metrics.peers.WithLabelValues("participant")); got != 5 {
		t.Errorf("cluster_node_peers{state=participant} = %v, want 5", got)
	}
	if got := promtestutil.ToFloat64(n.metrics.peers.WithLabelValues("viewer")); got != 0 {
		t.Errorf("cluster_node_peers{state=viewer} = %v, want 0", got)
	}
	if got := promtestutil.ToFloat64(n.metrics.receivedEvents.WithLabelValues("join")); got < 4 {
		t.Errorf("received join events = %v, want >= 4", got)
	}
	// Each peer's participant state arrives by gossip or by its push,
	// whichever is first (the other may still be on its way).
	updates := promtestutil.ToFloat64(n.metrics.receivedEvents.WithLabelValues("update")) +
		promtestutil.ToFloat64(n.metrics.receivedEvents.WithLabelValues(eventPush))
	if updates < 4 {
		t.Errorf("received update and push events = %v, want >= 4", updates)
	}
	if got := promtestutil.ToFloat64(n.metrics.broadcasts.WithLabelValues("update")); got != 1 {
		t.Errorf("update broadcasts = %v, want 1", got)
	}
	if err := promtestutil.GatherAndCompare(n.reg, strings.NewReader(`
# HELP cluster_node_gossip_alive_peers Members memberlist considers alive (suspect included), this node included.
# TYPE cluster_node_gossip_alive_peers gauge
cluster_node_gossip_alive_peers{cluster_name=""} 5
`), "cluster_node_gossip_alive_peers"); err != nil {
		t.Error(err)
	}
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{
		"cluster_node_info", "cluster_node_peers", "cluster_node_lamport_time",
		"cluster_node_gossip_health_score", "cluster_node_gossip_alive_peers",
		"cluster_node_gossip_received_events_total", "cluster_node_gossip_broadcasts_total",
		"cluster_ready_for_traffic", "cluster_minimum_size", "shoal_cluster_refused_messages_total",
	} {
		if !names[want] {
			t.Errorf("metric %s not registered", want)
		}
	}
}

func TestLamportClock(t *testing.T) {
	tn := newTestNet(t)
	nodes := startStatic(t, tn, 2, nil)
	a, b := nodes[0], nodes[1]
	testutil.Eventually(t, 10*time.Second, "two viewers", converged(nodes, expectView(allStates(nodes, Viewer))))

	before := a.lamport.Load()
	if err := a.SetState(Participant); err != nil {
		t.Fatal(err)
	}
	sent := a.lamport.Load()
	if sent != before+1 {
		t.Fatalf("local state change moved the clock from %d to %d, want +1", before, sent)
	}
	testutil.Eventually(t, 10*time.Second, "b sees a as participant", func() error {
		if got := view(b.Node); got != "node-01=participant,node-02=viewer" {
			return fmt.Errorf("b sees %s", got)
		}
		return nil
	})
	if got := b.lamport.Load(); got <= sent {
		t.Errorf("b's clock %d did not move past a's %d after observing it", got, sent)
	}
	if got := gauge(t, b, "cluster_node_lamport_time"); got != float64(b.lamport.Load()) {
		t.Errorf("cluster_node_lamport_time = %v, clock is %d", got, b.lamport.Load())
	}
}

// gauge reads one unlabelled gauge value from a node's registry.
func gauge(t *testing.T, n testNode, name string) float64 {
	t.Helper()
	mfs, err := n.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("metric %s not found", name)
	return 0
}

func TestGracefulLeaveDisappearsEverywhere(t *testing.T) {
	tn := newTestNet(t)
	// With this suspicion multiplier a failed node would take minutes to be
	// declared dead, so disappearing within the deadline proves the leave
	// message did it.
	nodes := startStatic(t, tn, 5, func(c *Config) {
		c.Memberlist = func(mc *memberlist.Config) { fastTimings(mc); mc.SuspicionMult = 1000 }
	})
	for _, n := range nodes {
		n.SetState(Participant)
	}
	testutil.Eventually(t, 15*time.Second, "converged", converged(nodes, expectView(allStates(nodes, Participant))))

	leaver := nodes[4]
	if err := leaver.SetState(Terminating); err != nil {
		t.Fatal(err)
	}
	want := allStates(nodes, Participant)
	want[leaver.cfg.NodeName] = Terminating
	testutil.Eventually(t, 10*time.Second, "all see the leaver terminating", converged(nodes[:4], expectView(want)))

	if err := leaver.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := leaver.Shutdown(); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "the leaver is gone everywhere", converged(nodes[:4], expectView(allStates(nodes[:4], Participant))))
	if got := promtestutil.ToFloat64(leaver.metrics.broadcasts.WithLabelValues("leave")); got != 1 {
		t.Errorf("leave broadcasts = %v", got)
	}
}

func TestKilledNodeDeclaredDead(t *testing.T) {
	tn := newTestNet(t)
	nodes := startStatic(t, tn, 5, nil)
	for _, n := range nodes {
		n.SetState(Participant)
	}
	testutil.Eventually(t, 15*time.Second, "converged", converged(nodes, expectView(allStates(nodes, Participant))))

	if err := nodes[2].Shutdown(); err != nil { // no Leave: a crash
		t.Fatal(err)
	}
	rest := append(append([]testNode{}, nodes[:2]...), nodes[3:]...)
	testutil.Eventually(t, 30*time.Second, "the killed node is declared dead", converged(rest, expectView(allStates(rest, Participant))))
	for _, n := range rest {
		if got := promtestutil.ToFloat64(n.metrics.receivedEvents.WithLabelValues("leave")); got < 1 {
			t.Errorf("%s counted %v leave events", n.cfg.NodeName, got)
		}
	}
}

// A node restarted under the same name must be seen in its new state, never
// as terminating from its previous life, whether that life ended with a
// leave or with a crash the others have not noticed yet.
func TestRestartedNodeRefutesItsPreviousLife(t *testing.T) {
	for _, graceful := range []bool{true, false} {
		t.Run(fmt.Sprintf("graceful=%v", graceful), func(t *testing.T) {
			tn := newTestNet(t)
			nodes := startStatic(t, tn, 4, func(c *Config) {
				// A slow failure detector keeps a crashed node "alive and
				// terminating" in the others' eyes while it restarts.
				c.Memberlist = func(mc *memberlist.Config) { fastTimings(mc); mc.SuspicionMult = 1000 }
			})
			for _, n := range nodes {
				n.SetState(Participant)
			}
			testutil.Eventually(t, 15*time.Second, "converged", converged(nodes, expectView(allStates(nodes, Participant))))

			old := nodes[3]
			// Bump the old life's incarnation a few times so that the
			// restarted node starts far below it.
			old.SetState(Terminating)
			want := allStates(nodes, Participant)
			want[old.cfg.NodeName] = Terminating
			testutil.Eventually(t, 10*time.Second, "old life seen terminating", converged(nodes[:3], expectView(want)))
			if graceful {
				if err := old.Leave(5 * time.Second); err != nil {
					t.Fatal(err)
				}
				old.Shutdown()
				testutil.Eventually(t, 10*time.Second, "old life gone", converged(nodes[:3], expectView(allStates(nodes[:3], Participant))))
			} else {
				old.Shutdown()
			}

			cfg := old.cfg
			cfg.Join = []string{tn.addr(1)}
			reborn := startNode(t, cfg)
			if err := reborn.SetState(Participant); err != nil {
				t.Fatal(err)
			}
			all := append(append([]testNode{}, nodes[:3]...), reborn)
			wantAll := expectView(allStates(all, Participant))
			testutil.Eventually(t, 15*time.Second, "restarted node seen as participant", converged(all, wantAll))
			// And it stays that way: no stale terminating news wins later.
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				if err := converged(all, wantAll)(); err != nil {
					t.Fatalf("view regressed after convergence: %v", err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			for _, n := range nodes[:3] {
				for _, p := range n.Peers() {
					if p.Name == reborn.cfg.NodeName && !p.StartTime.Equal(time.UnixMilli(reborn.startTime.UnixMilli())) {
						t.Errorf("%s sees %s with start time %s, want the new life's %s", n.cfg.NodeName, p.Name, p.StartTime, reborn.startTime)
					}
				}
			}
		})
	}
}

// TestHTTPAddrWithoutHost checks that ":9940" (the default web listen
// address) is advertised with the gossip host, so peers can reach it.
func TestHTTPAddrWithoutHost(t *testing.T) {
	tn := newTestNet(t)
	nodes := startStatic(t, tn, 2, func(c *Config) {
		c.HTTPAddr = ":9940"
	})
	want := net.JoinHostPort(tn.ip(1), "9940")
	if got := nodes[0].Self().HTTPAddr; got != want {
		t.Fatalf("Self().HTTPAddr = %q, want %q", got, want)
	}
	testutil.Eventually(t, 10*time.Second, "peer sees the completed HTTP address", func() error {
		for _, p := range nodes[1].Peers() {
			if p.Name == nodes[0].Self().Name && p.HTTPAddr == want {
				return nil
			}
		}
		return fmt.Errorf("peers: %+v", nodes[1].Peers())
	})
}

// A second node started with a name already in use is counted as a
// node_conflict event (the ClusterNodeNameConflict alert), and every
// cluster_* series carries the cluster name.
func TestNameConflictCounted(t *testing.T) {
	tn := newTestNet(t)
	mutate := func(c *Config) { c.ClusterName = "blue" }
	first := startStatic(t, tn, 2, mutate)[0]
	impostor := testConfig(tn, 3)
	impostor.NodeName = first.cfg.NodeName
	impostor.Join = []string{tn.addr(1)}
	mutate(&impostor)
	startNode(t, impostor)
	testutil.Eventually(t, 20*time.Second, "node_conflict counted on the first node", func() error {
		if got := promtestutil.ToFloat64(first.metrics.receivedEvents.WithLabelValues(eventNodeConflict)); got < 1 {
			return fmt.Errorf("node_conflict events = %v", got)
		}
		return nil
	})
	mfs, err := first.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "cluster_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "cluster_name" && lp.GetValue() == "blue" {
					found = true
				}
			}
			if !found {
				t.Errorf("%s%v has no cluster_name=\"blue\"", mf.GetName(), m.GetLabel())
			}
			seen++
		}
	}
	if seen == 0 {
		t.Fatal("no cluster_* series gathered")
	}
}
