package cluster

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// clusterFamilies returns the names of the node's metric families in reg.
func clusterFamilies(t *testing.T, reg prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := testutil.Families(reg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range mfs {
		if strings.HasPrefix(name, "cluster_") || strings.HasPrefix(name, "shoal_cluster_") {
			names = append(names, name)
		}
	}
	return names
}

// A node's metrics live as long as the node: a second node on the same
// registry is refused with an error (not a panic) while the first runs,
// without taking the first one's metrics away, and is accepted once the
// first has shut down, as after an in-process restart.
func TestMetricsUnregisteredOnShutdown(t *testing.T) {
	tn := newTestNet(t)
	reg := prometheus.NewRegistry()

	first, err := New(testConfig(tn, 1), testLogger(t, "first"), reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	running := clusterFamilies(t, reg)
	if len(running) < 10 {
		t.Fatalf("a running node exposes %d cluster families: %v", len(running), running)
	}

	if _, err := New(testConfig(tn, 2), testLogger(t, "clash"), reg); err == nil || !strings.Contains(err.Error(), "registering metrics") {
		t.Fatalf("a second node on the same registry: %v, want a registration error", err)
	}
	if got := clusterFamilies(t, reg); len(got) != len(running) {
		t.Fatalf("the refused node took metrics away: %d families left of %d", len(got), len(running))
	}

	if err := first.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if got := clusterFamilies(t, reg); len(got) != 0 {
		t.Fatalf("families left after Shutdown: %v", got)
	}

	again, err := New(testConfig(tn, 1), testLogger(t, "again"), reg)
	if err != nil {
		t.Fatalf("re-creating the node on the same registry: %v", err)
	}
	if err := again.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { again.Shutdown() })
	if got := clusterFamilies(t, reg); len(got) != len(running) {
		t.Fatalf("the re-created node exposes %d families, want %d", len(got), len(running))
	}
	if v, err := testutil.GatherValue(reg, "cluster_node_info", nil); err != nil || v != 1 {
		t.Errorf("cluster_node_info of the re-created node = %v, %v; want 1", v, err)
	}
}
