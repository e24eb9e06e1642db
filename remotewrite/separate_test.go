package remotewrite

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
)

// With SeparateBy, no request mixes values of the label (an HA-deduplicating
// receiver judges a whole request by its first series' replica label), and
// every sample still arrives once, in order per series.
func TestSeparateByKeepsRanksApart(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	var (
		mu       sync.Mutex
		mixed    []string
		requests int
	)
	rcv.respond = func(_ int, req *prompb.WriteRequest, _ http.ResponseWriter) int {
		seen := map[string]bool{}
		for _, ts := range req.Timeseries {
			b := labels.NewScratchBuilder(len(ts.Labels))
			seen[ts.ToLabels(&b, nil).Get("replica")] = true
		}
		mu.Lock()
		defer mu.Unlock()
		requests++
		if len(seen) > 1 {
			mixed = append(mixed, fmt.Sprint(seen))
		}
		return 0
	}
	var refs []int
	for i := 1; i <= 20; i++ {
		tw.series(i, "__name__", "test_metric", "i", fmt.Sprint(i), "replica", fmt.Sprint(i%3))
		refs = append(refs, i)
	}
	const rounds = 5
	for r := range rounds {
		tw.samples(refs, int64(1000*(r+1)))
	}
	m, err := NewManager(walDir, progDir, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	m.SeparateBy("replica")
	if err := m.ApplyConfig(loadConfig(t, "remote_write:\n  - url: URL0\n"+fastQueue, rcv.srv.URL)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "every sample received", func() bool { n, _ := rcv.count(); return n == len(refs)*rounds })
	if n, dups := rcv.count(); dups != 0 {
		t.Fatalf("%d samples, %d received more than once", n, dups)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(mixed) > 0 {
		t.Fatalf("%d of %d requests mixed replica values: %v", len(mixed), requests, mixed)
	}
}
