package scrape

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/shoal-dev/shoal/ring"
)

// A reload that changes a job's metrics path changes every target's scrape
// URL but not its series (job and instance stay), so not its key: the owner
// keeps it, nothing is fenced or gated, and the loop the scrape manager
// replaces writes no end-of-run staleness markers, which would otherwise
// land among the new loop's first samples of the same series.
func TestReloadChangingURLKeepsOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const before = "scrape_configs:\n  - job_name: app\n    metrics_path: /x\n"
		const after = "scrape_configs:\n  - job_name: app\n    metrics_path: /y\n"
		cfg1, cfg2 := loadConfig(t, before), loadConfig(t, after)
		sc1, _ := cfg1.GetScrapeConfigs()
		both := ring.New([]string{"a", "b"}, 0)
		var tl model.LabelSet
		var final labels.Labels
		for i := range 1000 {
			k, _, f1, err := KeyFor(nil, sc1[0], addr(i), nil)
			if err == nil && slices.Equal(both.Owners(k, 1, nil), []string{"a"}) {
				tl, final = addr(i), f1
				break
			}
		}
		if tl == nil {
			t.Fatal("no target owned by a")
		}
		for _, self := range []string{"a", "b"} {
			ho := &recordingHandoff{released: true}
			mgr := &oneTargetMgr{}
			h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho, HandoffDelay: time.Hour}, mgr, cfg1)
			h.f.SetRing(both, self, 1, true)
			h.send(t, tsets{"app": {{Source: "s", Targets: []model.LabelSet{tl}}}})
			want := 0
			if self == "a" {
				want = 1
			}
			if o, ok := readNow(t, h); !ok || count(o) != want {
				t.Fatalf("%s: %d targets before the reload, want %d: %v", self, count(o), want, o)
			}
			if self == "a" {
				// Running as the scrape manager would run it (old path).
				mgr.set("app", promscrape.NewTarget(final, sc1[0], nil, nil))
			}
			ho.take()
			ho.set(false) // the peer has not reloaded: nothing may wait for it
			if err := h.f.ApplyConfig(cfg2); err != nil {
				t.Fatal(err)
			}
			o, ok := readNow(t, h)
			if !ok || count(o) != want {
				t.Fatalf("%s: %d targets after the reload, want %d: %v", self, count(o), want, o)
			}
			synctest.Wait()
			if _, fenced, act := ho.take(); len(fenced) != 0 || len(act) != 0 {
				t.Errorf("%s: the reload fenced %v and activated %v; it moves nothing", self, fenced, act)
			}
			if ti := h.f.Targets(); len(ti) != 1 || ti[0].DropReason == ReasonWaitingHandoff {
				t.Errorf("%s: target waits for a hand-off after a reload that moves nothing: %+v", self, ti)
			}
			if d := mgr.disabledCount(); d != want {
				t.Errorf("%s: end-of-run staleness markers disabled for %d loops, want %d (the replaced one)", self, d, want)
			}
		}
	})
}

// oneTargetMgr is a ScrapeManager with at most one active target.
type oneTargetMgr struct {
	mu       sync.Mutex
	active   map[string][]*promscrape.Target
	disabled []*promscrape.Target
}

func (m *oneTargetMgr) set(job string, t *promscrape.Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.active = nil
	if t != nil {
		m.active = map[string][]*promscrape.Target{job: {t}}
	}
}

func (m *oneTargetMgr) disabledCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.disabled)
}

func (m *oneTargetMgr) DisableEndOfRunStalenessMarkers(_ string, ts []*promscrape.Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.disabled = append(m.disabled, ts...)
}

func (m *oneTargetMgr) TargetsActive() map[string][]*promscrape.Target {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active
}

// configHandoff is a Handoff that releases only the configuration the test
// names, as the placement package does once every peer has fenced it.
type configHandoff struct {
	recordingHandoff
	cfgMu    sync.Mutex
	released uint64
}

func (h *configHandoff) Released(_ Placement, config uint64) bool {
	h.cfgMu.Lock()
	defer h.cfgMu.Unlock()
	return config == h.released
}

func (h *configHandoff) release(config uint64) {
	h.cfgMu.Lock()
	defer h.cfgMu.Unlock()
	h.released = config
}

// movingTarget finds a discovered target whose key under keyBefore is owned
// by from and under keyAfter by to on r.
func movingTarget(t *testing.T, r *ring.Ring, from, to string, keyBefore, keyAfter func(model.LabelSet) (uint64, error)) model.LabelSet {
	t.Helper()
	for i := range 1000 {
		tl := addr(i)
		a, err1 := keyBefore(tl)
		b, err2 := keyAfter(tl)
		if err1 == nil && err2 == nil && slices.Equal(r.Owners(a, 1, nil), []string{from}) && slices.Equal(r.Owners(b, 1, nil), []string{to}) {
			return tl
		}
	}
	t.Fatalf("no target moving from %s to %s", from, to)
	return nil
}

func keyUnder(sc *config.ScrapeConfig) func(model.LabelSet) (uint64, error) {
	return func(tl model.LabelSet) (uint64, error) {
		k, _, _, err := KeyFor(nil, sc, tl, nil)
		return k, err
	}
}

// Relabelling from a discovered label can change the URL without any
// configuration change: the key, following the series, stays, and the
// owner goes on scraping it without a hand-off.
func TestDiscoveryChangingURLKeepsOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := loadConfig(t, `
scrape_configs:
  - job_name: app
    relabel_configs:
      - source_labels: [__meta_path]
        target_label: __metrics_path__
`)
		with := func(tl model.LabelSet, path string) model.LabelSet {
			out := maps.Clone(tl)
			out["__meta_path"] = model.LabelValue(path)
			return out
		}
		both := ring.New([]string{"a", "b"}, 0)
		for _, self := range []string{"a", "b"} {
			ho := &recordingHandoff{released: true}
			h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho, HandoffDelay: time.Hour}, nil, cfg)
			h.f.SetRing(both, self, 1, true)
			var tgs []model.LabelSet
			for i := range 20 {
				tgs = append(tgs, with(addr(i), "/x"))
			}
			h.send(t, tsets{"app": {{Source: "s", Targets: tgs}}})
			o, ok := readNow(t, h)
			if !ok {
				t.Fatal("no output")
			}
			owned := addresses(o)
			for i := range tgs {
				tgs[i] = with(addr(i), "/y")
			}
			ho.take()
			ho.set(false)
			h.send(t, tsets{"app": {{Source: "s", Targets: tgs}}})
			o, ok = readNow(t, h)
			if !ok || !slices.Equal(addresses(o)["app"], owned["app"]) || len(owned["app"]) == 0 {
				t.Fatalf("%s: owned %v before the path changed, %v after", self, owned, addresses(o))
			}
			synctest.Wait()
			if _, fenced, act := ho.take(); len(fenced) != 0 || len(act) != 0 {
				t.Errorf("%s: fenced %v and activated %v; nothing moved", self, fenced, act)
			}
		}
	})
}

// Replicas may differ in what does not key targets (a kubeconfig or
// credentials file per pod, a limit): their views must still agree, or every
// gained target waits out the hand-off delay and every hold the peers' next
// fence. What keys targets must still tell configurations apart.
func TestConfigIDFollowsOnlyWhatKeysTargets(t *testing.T) {
	base := "scrape_configs:\n  - job_name: app\n    metrics_path: /x\n"
	id := func(yml string) uint64 {
		t.Helper()
		sc, err := loadConfig(t, yml).GetScrapeConfigs()
		if err != nil {
			t.Fatal(err)
		}
		return ConfigID(sc)
	}
	same := []string{
		base + "    basic_auth:\n      username: u\n      password_file: /pods/a/password\n",
		base + "    sample_limit: 100\n    scrape_timeout: 5s\n",
		base + "    authorization:\n      credentials_file: /pods/a/token\n",
	}
	other := []string{
		"scrape_configs:\n  - job_name: app\n    metrics_path: /y\n",
		base + "    scheme: https\n",
		base + "    params:\n      module: [x]\n",
		base + "    relabel_configs:\n      - target_label: __address__\n        replacement: h:1\n",
		"scrape_configs:\n  - job_name: app2\n    metrics_path: /x\n",
	}
	want := id(base)
	for _, y := range same {
		if got := id(y); got != want {
			t.Errorf("ConfigID changed by a setting that keys no target:\n%s", y)
		}
	}
	if id(strings.Replace(same[0], "/pods/a/", "/pods/b/", 1)) != id(same[0]) {
		t.Error("ConfigID differs between replicas with their own kubeconfig paths")
	}
	for _, y := range other {
		if id(y) == want {
			t.Errorf("ConfigID blind to a setting that moves keys:\n%s", y)
		}
	}
}
