package scrape

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery/targetgroup"

	"github.com/shoal-dev/shoal/ring"
)

type tsets = map[string][]*targetgroup.Group

func loadConfig(t testing.TB, yml string) *config.Config {
	t.Helper()
	cfg, err := config.Load(yml, promslog.NewNopLogger())
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

const twoJobs = `
scrape_configs:
  - job_name: node
  - job_name: app
    metrics_path: /custom
    relabel_configs:
      - source_labels: [__meta_keep]
        regex: "no"
        action: drop
`

func addr(i int) model.LabelSet {
	return model.LabelSet{
		model.AddressLabel: model.LabelValue(fmt.Sprintf("10.0.%d.%d:9100", i/250, i%250)),
		"__meta_pod":       model.LabelValue(fmt.Sprintf("pod-%d", i)),
	}
}

// discovery returns n targets per job, in groups of 10.
func discovery(n int, jobs ...string) tsets {
	res := tsets{}
	for _, job := range jobs {
		for g := 0; g*10 < n; g++ {
			tg := &targetgroup.Group{Source: fmt.Sprintf("%s/%d", job, g), Labels: model.LabelSet{"zone": "z1"}}
			for i := g * 10; i < min(n, g*10+10); i++ {
				tg.Targets = append(tg.Targets, addr(i))
			}
			res[job] = append(res[job], tg)
		}
	}
	return res
}

// newFilter is NewFilter for tests: an error fails the test, and the Filter
// is closed when the test ends.
func newFilter(tb testing.TB, opts FilterOptions, mgr ScrapeManager, logger *slog.Logger, reg prometheus.Registerer) *Filter {
	tb.Helper()
	f, err := NewFilter(opts, mgr, logger, reg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(f.Close)
	return f
}

// harness runs a Filter with the given options until the test ends.
type harness struct {
	f   *Filter
	in  chan tsets
	out chan tsets
}

func startFilter(t *testing.T, opts FilterOptions, mgr ScrapeManager, cfg *config.Config) *harness {
	t.Helper()
	h := &harness{
		f:   newFilter(t, opts, mgr, promslog.NewNopLogger(), nil),
		in:  make(chan tsets),
		out: make(chan tsets),
	}
	if cfg != nil {
		if err := h.f.ApplyConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := h.f.Run(ctx, h.in, h.out); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	return h
}

func (h *harness) send(t *testing.T, ts tsets) {
	t.Helper()
	select {
	case h.in <- ts:
	case <-time.After(10 * time.Second):
		t.Fatal("filter did not take the discovery update")
	}
}

// waitOutput reads outputs until cond holds for one and returns it.
func (h *harness) waitOutput(t *testing.T, timeout time.Duration, what string, cond func(tsets) bool) tsets {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case o := <-h.out:
			if cond(o) {
				return o
			}
		case <-deadline:
			t.Fatalf("timed out waiting for output: %s", what)
		}
	}
}

// addresses returns the sorted addresses per job in an output.
func addresses(o tsets) map[string][]string {
	res := map[string][]string{}
	for job, groups := range o {
		res[job] = []string{}
		for _, g := range groups {
			for _, tl := range g.Targets {
				res[job] = append(res[job], string(tl[model.AddressLabel]))
			}
		}
		slices.Sort(res[job])
	}
	return res
}

func count(o tsets) int {
	n := 0
	for _, groups := range o {
		for _, g := range groups {
			n += len(g.Targets)
		}
	}
	return n
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ringWhere finds a set of extra node names such that pred holds for the
// ring built from base plus them; it keeps tests independent of where
// particular keys happen to land.
func ringWhere(t *testing.T, base []string, pred func(*ring.Ring) bool) *ring.Ring {
	t.Helper()
	for i := range 1000 {
		r := ring.New(append(slices.Clone(base), fmt.Sprintf("peer-%d", i)), 0)
		if pred(r) {
			return r
		}
	}
	t.Fatal("no ring satisfies the condition")
	return nil
}
