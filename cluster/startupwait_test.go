package cluster

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/internal/testutil"
)

var threeRemembered = []snapshotMember{
	{Name: "node-02", Addr: "127.0.0.2:7946", Participant: true},
	{Name: "node-03", Addr: "127.0.0.3:7946", Participant: true},
	{Name: "node-04", Addr: "127.0.0.4:7946"}, // a viewer then: not waited for
}

func TestStartupWaitDecides(t *testing.T) {
	t0 := time.Now()
	bothFailedTwice := map[string]int{"127.0.0.2:7946": 2, "127.0.0.3:7946": 2}
	for _, tc := range []struct {
		name     string
		elapsed  time.Duration
		failures map[string]int
		peers    map[string]Peer
		done     bool
		why      string
	}{
		{name: "nobody yet", peers: map[string]Peer{}, why: "remembered participants node-02, node-03 ("},
		{name: "a participant answers", peers: map[string]Peer{"node-03": {State: Participant}}, done: true, why: "participant node-03"},
		{name: "a participant the node did not know", peers: map[string]Peer{"node-09": {State: Participant}}, done: true, why: "participant node-09"},
		{name: "one remembered viewer back", peers: map[string]Peer{"node-02": {State: Viewer}}, why: "remembered participants node-03 ("},
		{name: "every remembered back as viewers", peers: map[string]Peer{"node-02": {State: Viewer}, "node-03": {State: Viewer}}, done: true, why: "all 2 remembered participants are back"},
		{name: "silent but too early", elapsed: rememberedSilence - time.Millisecond, failures: bothFailedTwice, peers: map[string]Peer{}},
		{name: "silent for long enough", elapsed: rememberedSilence, failures: bothFailedTwice, peers: map[string]Peer{}, done: true, why: "starting a new cluster"},
		{name: "long enough but an address tried once", elapsed: time.Minute, failures: map[string]int{"127.0.0.2:7946": 2, "127.0.0.3:7946": 1}, peers: map[string]Peer{}},
		{name: "one back as a viewer, the other silent", elapsed: rememberedSilence, failures: map[string]int{"127.0.0.3:7946": 2}, peers: map[string]Peer{"node-02": {State: Viewer}}, done: true, why: "neither did the remembered participants node-03:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newStartupWait(snapshot{Members: threeRemembered})
			w.since = t0
			for a, n := range tc.failures {
				for range n {
					w.joinFailed(a)
				}
			}
			done, why := w.decide(t0.Add(tc.elapsed), tc.peers)
			if done != tc.done || !strings.Contains(why, tc.why) {
				t.Errorf("decide = %v, %q; want %v, containing %q", done, why, tc.done, tc.why)
			}
		})
	}
	if newStartupWait(snapshot{Members: threeRemembered[2:]}) != nil {
		t.Error("a wait without remembered participants")
	}
}

// newRememberingNode is a node (not started) that remembers members.
func newRememberingNode(t *testing.T, waitForSize int, members ...snapshotMember) (*Node, *prometheus.Registry) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "members.json")
	writeTestSnapshot(t, path, "node-01", members...)
	cfg := DefaultConfig()
	cfg.NodeName = "node-01"
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.SnapshotPath = path
	cfg.WaitForSize = waitForSize
	cfg.WaitTimeout = time.Minute
	reg := prometheus.NewRegistry()
	n, err := New(cfg, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	// What Start does besides memberlist: the clocks of the waits.
	n.mu.Lock()
	n.readyTimer = time.AfterFunc(n.cfg.WaitTimeout, func() { n.markReady("wait timeout passed") })
	if n.startup != nil {
		n.startup.since = time.Now()
	}
	n.mu.Unlock()
	n.settleStartupWait(0, nil)
	t.Cleanup(func() { n.Shutdown() })
	return n, reg
}

// gossip has the node hear of a peer as memberlist would tell it.
func gossip(n *Node, name, addr string, s State) {
	host, port, _ := net.SplitHostPort(addr)
	p, _ := strconv.Atoi(port)
	n.observe(&memberlist.Node{Name: name, Addr: net.ParseIP(host), Port: uint16(p), Meta: encodeMeta(s, "", time.Now(), 1)}, "join")
}

// A restarted node whose remembered peers are all silent waits exactly the
// silence, once each was tried twice, then starts alone.
func TestRememberedSilenceEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newRememberingNode(t, 0, threeRemembered...)
		if n.Ready() {
			t.Fatal("ready at once although it remembers two participants")
		}
		if got := promtestutil.ToFloat64(n.metrics.remembered); got != 2 {
			t.Errorf("shoal_cluster_remembered_participants = %v, want 2", got)
		}
		if why := n.RememberedWait(); !strings.Contains(why, "remembered participants node-02, node-03 (") {
			t.Errorf("RememberedWait = %q", why)
		}
		for range rememberedAttempts {
			n.startupJoinFailed("127.0.0.2:7946")
			n.startupJoinFailed("127.0.0.3:7946")
			n.startupJoinFailed("127.0.0.4:7946") // not a participant: irrelevant
		}
		time.Sleep(rememberedSilence - time.Millisecond)
		synctest.Wait()
		if n.Ready() {
			t.Fatal("ready before the silence passed")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !n.Ready() || n.RememberedWait() != "" {
			t.Fatalf("not ready once every remembered peer was silent for %s", rememberedSilence)
		}
	})
}

// Peers that do not answer but were not tried often enough keep the node
// waiting until the wait timeout.
func TestUntriedPeersWaitForTheTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newRememberingNode(t, 0, threeRemembered...)
		n.startupJoinFailed("127.0.0.2:7946")
		time.Sleep(time.Minute - time.Millisecond)
		synctest.Wait()
		if n.Ready() {
			t.Fatal("ready before the wait timeout though a remembered peer was tried once only")
		}
		time.Sleep(time.Millisecond)
		synctest.Wait()
		if !n.Ready() {
			t.Fatal("not ready at the wait timeout")
		}
	})
}

// A participant that answers ends the wait at once: the cluster lives on.
func TestAnsweringParticipantEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newRememberingNode(t, 0, threeRemembered...)
		gossip(n, "node-02", "127.0.0.2:7946", Viewer)
		if n.Ready() {
			t.Fatal("ready with a viewer of two remembered participants")
		}
		gossip(n, "node-03", "127.0.0.3:7946", Participant)
		if !n.Ready() {
			t.Fatalf("not ready though participant node-03 answered: %s", n.RememberedWait())
		}
	})
}

// Every remembered participant back, as viewers (a whole cluster
// restarting), ends the wait too.
func TestWholeClusterBackEndsTheWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newRememberingNode(t, 0, threeRemembered...)
		gossip(n, "node-02", "127.0.0.2:7946", Viewer)
		gossip(n, "node-03", "127.0.0.3:7946", Viewer)
		if !n.Ready() {
			t.Fatalf("not ready with every remembered participant back: %s", n.RememberedWait())
		}
	})
}

// An explicit wait-for-size replaces the remembered one; a node that
// remembers no participant is ready at once as before.
func TestExplicitSizeOrNoParticipantMeansNoRememberedWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n, _ := newRememberingNode(t, 2, threeRemembered...)
		if n.startup != nil || n.RememberedWait() != "" {
			t.Error("a remembered wait besides --cluster.wait-for-size")
		}
		gossip(n, "node-09", "127.0.0.9:7946", Viewer)
		if !n.Ready() {
			t.Error("not ready with wait-for-size 2 met")
		}
		m, _ := newRememberingNode(t, 0, threeRemembered[2])
		if !m.Ready() {
			t.Error("not ready at once though it remembers no participant")
		}
	})
}

// A restarted seed whose join list names only itself rejoins the peers it
// remembers and is ready as soon as it sees them; it never bootstraps a
// cluster of one.
func TestRestartedSeedRejoinsRememberedPeers(t *testing.T) {
	tn := newTestNet(t)
	seedCfg := testConfig(tn, 1)
	seedCfg.Join = []string{tn.addr(1)}
	seedCfg.SnapshotPath = filepath.Join(t.TempDir(), "members.json")
	seed := startNode(t, seedCfg)
	seed.SetState(Participant)
	var others []testNode
	for i := 2; i <= 3; i++ {
		c := testConfig(tn, i)
		c.Join = []string{tn.addr(1)}
		n := startNode(t, c)
		n.SetState(Participant)
		others = append(others, n)
	}
	want := "node-01=participant,node-02=participant,node-03=participant"
	testutil.Eventually(t, 15*time.Second, "three participants", converged(append([]testNode{seed}, others...), want))
	testutil.Eventually(t, 15*time.Second, "the seed recorded its peers", func() error {
		s, err := readSnapshot(seedCfg.SnapshotPath, "node-01")
		if err != nil || len(s.Members) != 2 {
			return fmt.Errorf("snapshot %+v, %v", s.Members, err)
		}
		return nil
	})
	seed.SetState(Terminating)
	seed.Leave(time.Second)
	seed.Shutdown()
	testutil.Eventually(t, 15*time.Second, "the seed gone", converged(others, "node-02=participant,node-03=participant"))

	again, err := New(seedCfg, testLogger(t, "node-01"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if again.Ready() {
		t.Fatal("the restarted seed is ready before it found anyone")
	}
	if err := again.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Shutdown() })
	if err := again.WaitReady(waitCtx(t, 15*time.Second)); err != nil {
		t.Fatalf("the restarted seed never became ready: %v", err)
	}
	again.mu.Lock()
	_, why := again.startupDecideLocked()
	again.mu.Unlock()
	if !strings.Contains(why, "joined the running cluster") {
		t.Errorf("ready because %q, want because it joined the running cluster", why)
	}
	testutil.Eventually(t, 15*time.Second, "the seed back in its cluster",
		converged(append([]testNode{{Node: again}}, others...), "node-01=viewer,node-02=participant,node-03=participant"))
}

func TestColdWaitDecides(t *testing.T) {
	t0 := time.Now()
	addrs := []string{"127.0.0.1:7946", "127.0.0.5:7946"}
	for _, tc := range []struct {
		name     string
		elapsed  time.Duration
		failures int
		peers    map[string]Peer
		done     bool
		why      string
	}{
		{name: "nobody yet", failures: 1, peers: map[string]Peer{}, why: "nor the join addresses 127.0.0.1:7946, 127.0.0.5:7946"},
		{name: "a viewer answers", failures: 1, peers: map[string]Peer{"node-01": {State: Viewer}}, done: true, why: "joined peer node-01"},
		{name: "silent, tried twice", elapsed: rememberedSilence, failures: 2, peers: map[string]Peer{}, done: true, why: "starting a new cluster"},
		{name: "silent, tried once", elapsed: time.Minute, failures: 1, peers: map[string]Peer{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newColdWait(addrs, t0, tc.failures)
			done, why := w.decide(t0.Add(tc.elapsed), tc.peers)
			if done != tc.done || !strings.Contains(why, tc.why) {
				t.Errorf("decide = %v, %q; want %v, containing %q", done, why, tc.done, tc.why)
			}
		})
	}
}

// Replicas started together: one whose join address (the seed) does not
// answer yet waits for it instead of bootstrapping a ring of one, and is
// ready once the seed is up and joined.
func TestColdStartWaitsForTheSeed(t *testing.T) {
	tn := newTestNet(t)
	cfg := testConfig(tn, 2)
	cfg.Join = []string{tn.addr(1)}
	cfg.WaitTimeout = time.Hour
	second := startNode(t, cfg)
	if second.Ready() {
		t.Fatal("ready at once although its only join address did not answer")
	}
	if why := second.RememberedWait(); !strings.Contains(why, tn.addr(1)) {
		t.Errorf("the wait does not name the join address: %q", why)
	}
	seedCfg := testConfig(tn, 1)
	seedCfg.Join = []string{tn.addr(1)}
	seed := startNode(t, seedCfg)
	if !seed.Ready() {
		t.Error("a seed whose join list names only itself is not ready at once")
	}
	if err := second.WaitReady(waitCtx(t, 15*time.Second)); err != nil {
		t.Fatalf("never ready after the seed came up: %v", err)
	}
	testutil.Eventually(t, 15*time.Second, "two members", converged([]testNode{seed, second}, "node-01=viewer,node-02=viewer"))
}
