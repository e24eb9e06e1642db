package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// writeTestSnapshot writes a snapshot of node self remembering members.
func writeTestSnapshot(t *testing.T, path, self string, members ...snapshotMember) {
	t.Helper()
	s := snapshot{Version: snapshotVersion, Node: self, Written: time.Now().UTC(), Members: members}
	if err := os.WriteFile(path, s.encode(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestSnapshotWrittenAndReadBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "members.json")
	cfg := DefaultConfig()
	cfg.NodeName = "node-01"
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.SnapshotPath = path
	n, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.peers["node-02"] = Peer{Name: "node-02", Addr: "127.0.0.2:7946", State: Participant}
	n.peers["node-03"] = Peer{Name: "node-03", Addr: "127.0.0.3:7946", State: Viewer}
	n.peers["node-04"] = Peer{Name: "node-04", Addr: "127.0.0.4:7946", State: Terminating}
	n.writeSnapshot()

	s, err := readSnapshot(path, "node-01")
	if err != nil {
		t.Fatal(err)
	}
	want := []snapshotMember{
		{Name: "node-02", Addr: "127.0.0.2:7946", Participant: true},
		{Name: "node-03", Addr: "127.0.0.3:7946"},
		{Name: "node-04", Addr: "127.0.0.4:7946"}, // terminating: left on purpose, not waited for
	}
	if !slices.Equal(s.Members, want) || s.Node != "node-01" || s.Left || s.Written.IsZero() {
		t.Fatalf("read back %+v, want members %+v of node-01, not left, with a time", s, want)
	}

	// An unchanged member set is not written again.
	before, _ := os.ReadFile(path)
	time.Sleep(10 * time.Millisecond)
	n.writeSnapshot()
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("an unchanged member set was written again")
	}

	// A reader that finds itself in the list (a storage path reused under
	// another name) does not remember itself.
	s, err = readSnapshot(path, "node-02")
	if err != nil || len(s.Members) != 2 || s.Members[0].Name != "node-03" {
		t.Errorf("read as node-02: %+v, %v", s.Members, err)
	}
}

func TestSnapshotMissingIsNoSnapshot(t *testing.T) {
	s, err := readSnapshot(filepath.Join(t.TempDir(), "none.json"), "node-01")
	if err != nil || len(s.Members) != 0 {
		t.Fatalf("missing file: %+v, %v; want nothing and no error", s, err)
	}
}

// A torn, corrupt or foreign file is ignored with a count and a log line:
// the node starts from its join list, as if it remembered nothing.
func TestSnapshotCorruptIsIgnored(t *testing.T) {
	good := snapshot{Version: snapshotVersion, Node: "node-01", Members: []snapshotMember{{Name: "node-02", Addr: "127.0.0.2:7946", Participant: true}}}.encode()
	for name, content := range map[string][]byte{
		"torn":          good[:len(good)/2],
		"garbage":       []byte("\x00\x01not json"),
		"empty":         nil,
		"other version": []byte(`{"version":99,"node":"node-01","members":[]}`),
		"bad address":   []byte(`{"version":1,"node":"node-01","members":[{"name":"node-02","addr":"nowhere","participant":true}]}`),
		"no name":       []byte(`{"version":1,"node":"node-01","members":[{"name":"","addr":"127.0.0.2:1","participant":true}]}`),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "members.json")
			if err := os.WriteFile(path, content, 0o644); err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			cfg.NodeName = "node-01"
			cfg.ListenAddr = "127.0.0.1:0"
			cfg.SnapshotPath = path
			reg := prometheus.NewRegistry()
			n, err := New(cfg, nil, reg)
			if err != nil {
				t.Fatalf("New with a %s snapshot: %v", name, err)
			}
			if got := promtestutil.ToFloat64(n.metrics.snapshotErrs.WithLabelValues("read")); got != 1 {
				t.Errorf("shoal_cluster_snapshot_errors_total{op=read} = %v, want 1", got)
			}
			if !n.Ready() || len(n.remembered) != 0 {
				t.Errorf("ready %v, remembered %v: a node with an unusable snapshot must start as if it had none", n.Ready(), n.remembered)
			}
		})
	}
}

// A write that fails is counted and logged; the node runs on.
func TestSnapshotWriteFailureIsCounted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.NodeName = "node-01"
	cfg.ListenAddr = "127.0.0.1:0"
	cfg.SnapshotPath = filepath.Join(t.TempDir(), "missing-dir", "members.json")
	n, err := New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.peers["node-02"] = Peer{Name: "node-02", Addr: "127.0.0.2:7946", State: Participant}
	n.writeSnapshot()
	if got := promtestutil.ToFloat64(n.metrics.snapshotErrs.WithLabelValues("write")); got != 1 {
		t.Errorf("shoal_cluster_snapshot_errors_total{op=write} = %v, want 1", got)
	}
}

// A running node records membership changes (debounced) and, at shutdown,
// that it left gracefully; a peer that left gracefully is no longer a
// participant to wait for.
func TestSnapshotFollowsMembershipAndRecordsGracefulLeave(t *testing.T) {
	tn := newTestNet(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "members.json")
	cfg := testConfig(tn, 1)
	cfg.SnapshotPath = path
	first := startNode(t, cfg)
	join := func(i int) testNode {
		c := testConfig(tn, i)
		c.Join = []string{tn.addr(1)}
		n := startNode(t, c)
		if err := n.SetState(Participant); err != nil {
			t.Fatal(err)
		}
		return n
	}
	second, third := join(2), join(3)
	read := func() snapshot {
		s, err := readSnapshot(path, "node-01")
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	testutil.Eventually(t, 15*time.Second, "both peers recorded as participants", func() error {
		s := read()
		if len(s.Members) != 2 || !s.Members[0].Participant || !s.Members[1].Participant {
			return fmt.Errorf("snapshot members %+v", s.Members)
		}
		if s.Members[0].Addr != tn.addr(2) || s.Members[1].Addr != tn.addr(3) {
			return fmt.Errorf("snapshot addresses %+v", s.Members)
		}
		return nil
	})

	// The third leaves on purpose: it is no longer remembered.
	third.SetState(Terminating)
	third.Leave(time.Second)
	third.Shutdown()
	testutil.Eventually(t, 15*time.Second, "the peer that left forgotten", func() error {
		if s := read(); len(s.Members) != 1 || s.Members[0].Name != "node-02" {
			return fmt.Errorf("snapshot members %+v", s.Members)
		}
		return nil
	})

	// This node leaves gracefully: the last record says so, and still
	// names the peer that was alive.
	first.SetState(Terminating)
	if err := first.Leave(time.Second); err != nil {
		t.Fatal(err)
	}
	first.Shutdown()
	s := read()
	if !s.Left || len(s.Members) != 1 || s.Members[0].Name != "node-02" || !s.Members[0].Participant {
		t.Errorf("last record %+v, want left with participant node-02", s)
	}
	_ = second
}
