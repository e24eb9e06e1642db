package cluster

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// departureOf is n's record of the departed member name (zero if none).
func departureOf(n *Node, name string) Departure {
	for _, d := range n.Departed() {
		if d.Peer.Name == name {
			return d
		}
	}
	return Departure{}
}

// TestLeaversLastStateReachesPeersAcrossTheLeave: a node that acknowledges
// its last samples and leaves at once must still tell its peers: their
// holds wait for that acknowledgement. Here the leaver's push loop is
// stopped and memberlist's probes and state exchange are an hour apart, so
// the update can only arrive with the leave itself; the gossiped copy is
// replaced in memberlist's queue by the leave notice.
func TestLeaversLastStateReachesPeersAcrossTheLeave(t *testing.T) {
	tn := newTestNet(t)
	quiet := func(c *memberlist.Config) {
		fastTimings(c)
		c.ProbeInterval = time.Hour
		c.PushPullInterval = time.Hour
	}
	b := func() testNode {
		cfg := testConfig(tn, 2)
		cfg.Memberlist = quiet
		return startNode(t, cfg)
	}()
	cfg := testConfig(tn, 1)
	cfg.Memberlist = quiet
	cfg.Join = []string{tn.addr(2)}
	a, err := New(cfg, testLogger(t, cfg.NodeName), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	loops, stopLoops := context.WithCancel(t.Context())
	if err := a.Start(loops); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Shutdown() })
	testutil.Eventually(t, 10*time.Second, "b sees a", func() error {
		if peerNamed(b.Node, "node-01").Name == "" {
			return fmt.Errorf("b sees %s", view(b.Node))
		}
		return nil
	})
	stopLoops()
	a.wg.Wait() // the push loop has returned; a's gossip still runs

	if err := a.SetState(Terminating); err != nil {
		t.Fatal(err)
	}
	final := Watermarks{FencedSeq: 9, FencedRing: 3, AckedSeq: 9}
	a.SetWatermarks(final)
	if err := a.Leave(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 10*time.Second, "b saw a leave", func() error {
		if d := departureOf(b.Node, "node-01"); d.Left.IsZero() {
			return fmt.Errorf("no departure of a; b sees %s", view(b.Node))
		}
		return nil
	})
	d := departureOf(b.Node, "node-01")
	if d.Peer.Handoff != final || d.Peer.State != Terminating {
		t.Fatalf("b's record of a: %v %+v, want terminating %+v", d.Peer.State, d.Peer.Handoff, final)
	}
}

// TestPushAfterTheLeaveUpdatesTheDeparture: a push of a departed member's
// life that arrives after memberlist reported the leave updates its last
// state; one of its next life (a restart) does not.
func TestPushAfterTheLeaveUpdatesTheDeparture(t *testing.T) {
	n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_700_000_000_000)
	meta := func(seq, acked uint64, start time.Time) []byte {
		return nodeMeta{State: Terminating.String(), StartTime: start.UnixMilli(), Seq: seq,
			Features: featureMetaPush, FencedSeq: 4, AckedSeq: acked}.marshal()
	}
	mn := &memberlist.Node{Name: "peer", Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: meta(2, 3, start)}
	n.observe(mn, "update")
	ch, cancel := n.Subscribe()
	defer cancel()
	n.forget(mn)
	<-ch
	if d := departureOf(n, "peer"); d.Peer.Handoff.AckedSeq != 3 || d.Left.IsZero() {
		t.Fatalf("departure %+v, want acked 3", d)
	}
	n.receiveMetaPush(encodeMetaPush("peer", meta(3, 4, start)))
	select {
	case <-ch:
	default:
		t.Fatal("a newer state of a departed member woke no subscriber")
	}
	if d := departureOf(n, "peer"); d.Peer.Handoff.AckedSeq != 4 {
		t.Fatalf("departure %+v after a late push, want acked 4", d.Peer.Handoff)
	}
	n.receiveMetaPush(encodeMetaPush("peer", meta(2, 3, start)))
	n.receiveMetaPush(encodeMetaPush("peer", meta(9, 1, start.Add(time.Minute))))
	if d := departureOf(n, "peer"); d.Peer.Handoff.AckedSeq != 4 {
		t.Fatalf("departure %+v after an older push and one of the next life, want acked 4", d.Peer.Handoff)
	}
	if len(n.Peers()) != 1 {
		t.Fatalf("a push made a member: %v", view(n))
	}
	n.observe(mn, "join")
	if d := departureOf(n, "peer"); !d.Left.IsZero() {
		t.Fatalf("a member back is still departed: %+v", d)
	}
}
