package scrape

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/discovery/targetgroup"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	promscrape "github.com/prometheus/prometheus/scrape"
	"github.com/prometheus/prometheus/storage"

	"github.com/shoal-dev/shoal/ring"
)

// recorder is a storage.AppendableV2 that keeps every committed sample.
type recorder struct {
	mu      sync.Mutex
	samples []recorded
}

type recorded struct {
	lset labels.Labels
	t    int64
	v    float64
}

func (r *recorder) AppenderV2(context.Context) storage.AppenderV2 { return &recordingAppender{r: r} }

// staleMarkers counts staleness markers and other samples for an instance.
func (r *recorder) count(instance string) (samples, stale int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.samples {
		if s.lset.Get(model.InstanceLabel) != instance {
			continue
		}
		if value.IsStaleNaN(s.v) {
			stale++
		} else {
			samples++
		}
	}
	return samples, stale
}

type recordingAppender struct {
	r     *recorder
	batch []recorded
}

func (a *recordingAppender) Append(_ storage.SeriesRef, ls labels.Labels, _, t int64, v float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AOptions) (storage.SeriesRef, error) {
	a.batch = append(a.batch, recorded{lset: ls.Copy(), t: t, v: v})
	return storage.SeriesRef(ls.Hash()), nil
}

func (a *recordingAppender) Commit() error {
	a.r.mu.Lock()
	a.r.samples = append(a.r.samples, a.batch...)
	a.r.mu.Unlock()
	a.batch = nil
	return nil
}

func (a *recordingAppender) Rollback() error {
	a.batch = nil
	return nil
}

func exporter(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write([]byte("# TYPE handoff_test gauge\nhandoff_test 1\n"))
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return srv, u.Host
}

// TestHandoffWithScrapeManager runs the Filter in front of a real Prometheus
// scrape manager scraping real HTTP targets. A target that leaves because of
// the ring (or because the node stops participating) must get no staleness
// markers, while a target removed from discovery gets them as usual.
func TestHandoffWithScrapeManager(t *testing.T) {
	if testing.Short() {
		t.Skip("scrapes real targets for a few seconds")
	}
	const interval = 200 * time.Millisecond
	cfg := loadConfig(t, `
global:
  scrape_interval: 200ms
  scrape_timeout: 150ms
scrape_configs:
  - job_name: handoff
`)
	for _, tc := range []struct {
		name  string
		leave func(f *Filter)
	}{
		{"ring moves it to a peer", func(f *Filter) { f.SetRing(ring.New([]string{"b"}, 0), "a", 1, true) }},
		{"node terminating", func(f *Filter) { f.SetRing(ring.New([]string{"a"}, 0), "a", 1, false) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, moved := exporter(t)
			_, removed := exporter(t)
			rec := &recorder{}
			logger := promslog.NewNopLogger()
			mgr, err := promscrape.NewManager(&promscrape.Options{
				DiscoveryReloadInterval: model.Duration(100 * time.Millisecond),
			}, logger, nil, nil, rec, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			if err := mgr.ApplyConfig(cfg); err != nil {
				t.Fatal(err)
			}
			scrapeCh := make(chan map[string][]*targetgroup.Group)
			var wg sync.WaitGroup
			wg.Go(func() { _ = mgr.Run(scrapeCh) })

			h := &harness{
				f:  newFilter(t, FilterOptions{RingCoalesce: -1}, mgr, logger, nil),
				in: make(chan tsets),
			}
			if err := h.f.ApplyConfig(cfg); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			wg.Go(func() { _ = h.f.Run(ctx, h.in, scrapeCh) })
			t.Cleanup(func() {
				cancel()
				mgr.Stop()
				wg.Wait()
			})

			h.f.SetRing(ring.New([]string{"a"}, 0), "a", 1, true)
			group := func(addrs ...string) tsets {
				g := &targetgroup.Group{Source: "static"}
				for _, a := range addrs {
					g.Targets = append(g.Targets, model.LabelSet{model.AddressLabel: model.LabelValue(a)})
				}
				return tsets{"handoff": {g}}
			}
			h.send(t, group(moved, removed))
			waitFor(t, 10*time.Second, "both targets scraped", func() bool {
				a, _ := rec.count(moved)
				b, _ := rec.count(removed)
				return a > 0 && b > 0
			})

			// At the same moment: one target leaves discovery, the other
			// leaves this node because of the ring.
			h.send(t, group(moved))
			tc.leave(h.f)
			waitFor(t, 10*time.Second, "both scrape loops stopped", func() bool {
				return len(mgr.TargetsActive()["handoff"]) == 0
			})
			stopped := time.Now()

			waitFor(t, 10*time.Second, "staleness markers for the target removed from discovery", func() bool {
				_, stale := rec.count(removed)
				return stale > 0
			})
			// A missing marker cannot be polled for: wait until the moved
			// target's markers would have been written too (they come just
			// over two intervals after its loop stopped), with a margin.
			if wait := time.Until(stopped.Add(4 * interval)); wait > 0 {
				time.Sleep(wait)
			}
			samples, stale := rec.count(moved)
			if stale != 0 {
				t.Fatalf("handed-off target got %d staleness markers (%d samples)", stale, samples)
			}
			if got := testutil.ToFloat64(h.f.metrics.movedOut); got != 1 {
				t.Errorf("shoal_targets_moved_total{direction=out}=%v, want 1", got)
			}
		})
	}
}
