package cluster

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Config.Capabilities travel in the metadata as they are, absent ones
// (older versions) read as zero, and Self says what peers see: a layer that
// asks every participant, this node included, must find them on itself too.
func TestCapabilitiesInMetadataAndSelf(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName, cfg.ListenAddr, cfg.Capabilities = "n1", "127.0.0.1:0", 0b101
	n, err := New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Self().Capabilities; got != 0b101 {
		t.Fatalf("Self().Capabilities = %b, want 101", got)
	}
	if p := asPeer(t, n); p.Capabilities != 0b101 {
		t.Fatalf("a peer reads capabilities %b, want 101", p.Capabilities)
	}
	m, st, err := decodeMeta([]byte(`{"v":1,"s":"participant","t":1700000000000,"l":12}`))
	if err != nil {
		t.Fatal(err)
	}
	if p := peerFrom("old", "a:1", m, st); p.Capabilities != 0 {
		t.Fatalf("older metadata reads capabilities %b", p.Capabilities)
	}
}

// A node's own start time is the one its peers read from its metadata: a
// hold carried with a backlog to this node compares the start time the
// leaver saw with this node's Self, and a finer Self read as "restarted",
// which let the hold go before this node's samples were acknowledged.
func TestSelfStartTimeIsWhatPeersRead(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName, cfg.ListenAddr = "n1", "127.0.0.1:0"
	n, err := New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if self, peer := n.Self().StartTime, asPeer(t, n).StartTime; !self.Equal(peer) {
		t.Fatalf("Self().StartTime = %v, peers read %v", self, peer)
	}
}

// asPeer is n as its peers read it from its metadata.
func asPeer(t *testing.T, n *Node) Peer {
	t.Helper()
	n.mu.Lock()
	b := n.metaLocked()
	n.mu.Unlock()
	m, st, err := decodeMeta(b)
	if err != nil {
		t.Fatal(err)
	}
	return peerFrom(n.cfg.NodeName, "a:1", m, st)
}
