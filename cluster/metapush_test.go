package cluster

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// TestFenceReachesPeerByPushWithoutGossip: with memberlist's gossip, probes
// and state exchange all an hour apart, a watermark change can only reach
// the peer through the direct push.
func TestFenceReachesPeerByPushWithoutGossip(t *testing.T) {
	tn := newTestNet(t)
	idle := func(c *memberlist.Config) {
		fastTimings(c)
		c.GossipInterval = time.Hour
		c.ProbeInterval = time.Hour
		c.PushPullInterval = time.Hour
	}
	var nodes []testNode
	for i := 1; i <= 2; i++ {
		cfg := testConfig(tn, i)
		cfg.Memberlist = idle
		cfg.Join = []string{tn.addr(1)}
		nodes = append(nodes, startNode(t, cfg))
	}
	a, b := nodes[0], nodes[1]
	testutil.Eventually(t, 10*time.Second, "both nodes see each other", func() error {
		if view(a.Node) != view(b.Node) || len(a.Peers()) != 2 {
			return fmt.Errorf("a sees %s, b %s", view(a.Node), view(b.Node))
		}
		return nil
	})

	want := Watermarks{FencedSeq: 7, FencedRing: 42, AckedSeq: 6, FencedPlacement: 9}
	a.SetWatermarks(want)
	testutil.Eventually(t, 10*time.Second, "b holds a's fence", func() error {
		if got := peerNamed(b.Node, "node-01").Handoff; got != want {
			return fmt.Errorf("b holds %+v of a, want %+v", got, want)
		}
		return nil
	})
	if got := promtestutil.ToFloat64(b.metrics.receivedEvents.WithLabelValues(eventPush)); got < 1 {
		t.Errorf("b counted %v pushes, want at least 1", got)
	}
	if got := promtestutil.ToFloat64(a.metrics.metaPushes.WithLabelValues("success")); got < 1 {
		t.Errorf("a counted %v successful pushes, want at least 1", got)
	}
}

// TestOlderGossipDoesNotUndoAPushedUpdate: gossip and pushes may deliver a
// peer's metadata out of order; the newest of one life wins, and another
// life's metadata (a restart) replaces it whatever its sequence.
func TestOlderGossipDoesNotUndoAPushedUpdate(t *testing.T) {
	n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1_700_000_000_000)
	meta := func(seq, fenced uint64, start time.Time) []byte {
		return nodeMeta{State: Participant.String(), StartTime: start.UnixMilli(), Seq: seq,
			Features: featureMetaPush, FencedSeq: fenced}.marshal()
	}
	heard := func(b []byte) {
		n.observe(&memberlist.Node{Name: "peer", Addr: net.ParseIP("127.0.0.2"), Port: 7946, Meta: b}, "update")
	}
	fenced := func() uint64 { return peerNamed(n, "peer").Handoff.FencedSeq }

	heard(meta(2, 1, start))
	n.receiveMetaPush(encodeMetaPush("peer", meta(5, 3, start)))
	if got := fenced(); got != 3 {
		t.Fatalf("after the push: fenced %d, want 3", got)
	}
	heard(meta(3, 2, start))
	if got := fenced(); got != 3 {
		t.Errorf("older gossip after the push: fenced %d, want 3 kept", got)
	}
	n.receiveMetaPush(encodeMetaPush("peer", meta(4, 2, start)))
	if got := fenced(); got != 3 {
		t.Errorf("older push: fenced %d, want 3 kept", got)
	}
	n.receiveMetaPush(encodeMetaPush("peer", meta(9, 8, start.Add(time.Second))))
	if got := fenced(); got != 3 {
		t.Errorf("push of another life: fenced %d, want 3 kept (membership news comes from memberlist)", got)
	}
	heard(meta(1, 0, start.Add(time.Second)))
	if got := fenced(); got != 0 {
		t.Errorf("gossip of the peer's next life: fenced %d, want its 0", got)
	}
	n.receiveMetaPush(encodeMetaPush("stranger", meta(1, 1, start)))
	if len(n.Peers()) != 2 {
		t.Errorf("a push from a node memberlist has not reported added it: peers %v", n.Peers())
	}
}

// TestBadMetadataPushIsCountedAndIgnored: a truncated push or one with
// unreadable metadata changes nothing and is counted.
func TestBadMetadataPushIsCountedAndIgnored(t *testing.T) {
	n, err := New(DefaultConfig(), testLogger(t, "n"), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	gossip(n, "peer", "127.0.0.2:7946", Participant)
	for i, b := range [][]byte{
		{msgMeta},
		{msgMeta, 200},
		encodeMetaPush("peer", []byte("{not json")),
		encodeMetaPush("peer", []byte(`{"v":99,"s":"terminating"}`)),
	} {
		(*delegate)(n).NotifyMsg(b)
		if got := promtestutil.ToFloat64(n.metrics.badMeta); got != float64(i+1) {
			t.Errorf("push %d: %v bad metadata counted, want %d", i, got, i+1)
		}
	}
	if p := peerNamed(n, "peer"); p.State != Participant {
		t.Errorf("peer is %s after bad pushes, want participant", p.State)
	}
}

// peerNamed is what n holds of one peer; the zero Peer when none.
func peerNamed(n *Node, name string) Peer {
	for _, p := range n.Peers() {
		if p.Name == name {
			return p
		}
	}
	return Peer{}
}
