package monitors_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promtestutil "github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/promslog"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/shoal-dev/shoal/monitors"
)

// A second watcher on the same registry is refused and leaves the first
// one's metrics in place; Run takes them back when it returns.
func TestWatcherMetricsRegisteredOnceAndUnregisteredByRun(t *testing.T) {
	// Nothing listens on loopback port 1: a list, if one starts, is refused.
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w, err := monitors.NewWatcher(dyn, nil, monitors.WatchOptions{}, promslog.NewNopLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := monitors.NewWatcher(dyn, nil, monitors.WatchOptions{}, promslog.NewNopLogger(), reg); err == nil {
		t.Fatal("a second watcher registered the same metrics")
	}
	if n, err := promtestutil.GatherAndCount(reg, "shoal_monitors_regenerations_total", "shoal_monitors_resync_kept_total"); err != nil || n != 2 {
		t.Fatalf("the first watcher's metrics after the refused second: %d series, %v; want 2", n, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w.Run(ctx, func(*monitors.Result) {})
	if n, err := promtestutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Fatalf("%d series left after Run returned (%v), want none", n, err)
	}
}
