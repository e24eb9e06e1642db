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

	"github.com/shoal-dev/shoal/placement/gate"
	"github.com/shoal-dev/shoal/ring"
)

// A reload that changes a job's metrics path changes every target's key but
// not its series (job and instance stay). When the new key belongs to
// another node, that node starts the target at once (nothing is gated: the
// ring did not change), so this node must at least fence the old unit and
// write no end-of-run staleness markers for it, as for any hand-off.
// Otherwise the old key counts as "went away", and the receiver gets this
// node's last samples and NaN markers interleaved with the new owner's first
// samples of the same series. (Found in review.)
func TestReloadMovingKeyFencesOldUnit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const before = "scrape_configs:\n  - job_name: app\n    metrics_path: /x\n"
		const after = "scrape_configs:\n  - job_name: app\n    metrics_path: /y\n"
		cfg1, cfg2 := loadConfig(t, before), loadConfig(t, after)
		sc1, _ := cfg1.GetScrapeConfigs()
		sc2, _ := cfg2.GetScrapeConfigs()
		both := ring.New([]string{"a", "b"}, 0)
		lb := labels.NewBuilder(labels.EmptyLabels())
		var tl model.LabelSet
		var k1 uint64
		var final labels.Labels
		for i := range 1000 {
			c := addr(i)
			a, _, f1, err1 := KeyFor(lb, sc1[0], c, nil)
			b, _, _, err2 := KeyFor(lb, sc2[0], c, nil)
			if err1 == nil && err2 == nil && slices.Equal(both.Owners(a, 1, nil), []string{"a"}) && slices.Equal(both.Owners(b, 1, nil), []string{"b"}) {
				tl, k1, final = c, a, f1
				break
			}
		}
		if tl == nil {
			t.Fatal("no target moving from a to b with the path")
		}

		ho := &recordingHandoff{released: true}
		mgr := &oneTargetMgr{}
		h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho}, mgr, cfg1)
		h.f.SetRing(both, "a", 1, true)
		h.send(t, tsets{"app": {{Source: "s", Targets: []model.LabelSet{tl}}}})
		if o, ok := readNow(t, h); !ok || count(o) != 1 {
			t.Fatalf("target not owned before the reload: %v", o)
		}
		// Running as the scrape manager would run it (old path).
		mgr.set("app", promscrape.NewTarget(final, sc1[0], nil, nil))
		ho.take()

		if err := h.f.ApplyConfig(cfg2); err != nil {
			t.Fatal(err)
		}
		if o, ok := readNow(t, h); !ok || count(o) != 0 {
			t.Fatalf("target still owned after the reload: %v", o)
		}
		// The staleness decision is taken while the old loop still runs.
		disabled := mgr.disabledCount()
		mgr.set("app", nil)
		time.Sleep(2 * StopWait)
		synctest.Wait()
		_, fenced, _ := ho.take()
		if !slices.Contains(fenced, Unit{Key: k1}) {
			t.Errorf("old unit %v not fenced after a reload moved its series to b (fenced %v)", Unit{Key: k1}, fenced)
		}
		if disabled == 0 {
			t.Error("end-of-run staleness markers not disabled for a series that b continues")
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

func (h *configHandoff) Admit(now time.Time, r Placement, config uint64, cands []gate.Candidate) gate.Admission {
	return h.admit(now, r, config, cands, h)
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

// The gaining side of a reload that moves a key: the new owner holds the
// target back until every peer has fenced under the new configuration (the
// old owner has stopped it), bounded by the hand-off delay.
func TestReloadMovingKeyGatesNewOwner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg1 := loadConfig(t, "scrape_configs:\n  - job_name: app\n    metrics_path: /x\n")
		cfg2 := loadConfig(t, "scrape_configs:\n  - job_name: app\n    metrics_path: /y\n")
		sc1, _ := cfg1.GetScrapeConfigs()
		sc2, _ := cfg2.GetScrapeConfigs()
		id1, id2 := ConfigID(sc1), ConfigID(sc2)
		if id1 == id2 {
			t.Fatal("two configurations with one ConfigID")
		}
		both := ring.New([]string{"a", "b"}, 0)
		tl := movingTarget(t, both, "a", "b", keyUnder(sc1[0]), keyUnder(sc2[0]))

		for _, peerFences := range []bool{true, false} {
			ho := &configHandoff{released: id1}
			h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho}, nil, cfg1)
			h.f.SetRing(both, "b", 1, true)
			h.send(t, tsets{"app": {{Source: "s", Targets: []model.LabelSet{tl}}}})
			if o, ok := readNow(t, h); !ok || count(o) != 0 {
				t.Fatalf("b owns the target before the reload: %v", o)
			}
			if err := h.f.ApplyConfig(cfg2); err != nil {
				t.Fatal(err)
			}
			if o, ok := readNow(t, h); ok && count(o) != 0 {
				t.Fatal("b started the moved target before a fenced under the new configuration")
			}
			if ti := h.f.Targets(); len(ti) != 1 || ti[0].DropReason != ReasonWaitingHandoff {
				t.Fatalf("target not waiting for hand-off: %+v", ti)
			}
			if peerFences {
				ho.release(id2)
				ho.recheck()
			} else {
				time.Sleep(2 * time.Second)
			}
			if o, ok := readNow(t, h); !ok || count(o) != 1 {
				t.Fatalf("peer fenced %v: moved target not started: %v", peerFences, o)
			}
			if _, _, act := ho.take(); len(act) != 1 {
				t.Fatalf("activated %v, want the moved unit", act)
			}
			want := 0.0
			if !peerFences {
				want = 1
			}
			if v := ho.gateTimeouts(t); v != want {
				t.Fatalf("shoal_handoff_delay_expired_total = %v, want %v", v, want)
			}
		}
	})
}

// Relabelling from a discovered label can change the URL without any
// configuration change; the peers' fences say nothing about discovery, so
// the new owner waits the whole hand-off delay, and the old one hands the
// target off (fence, no staleness markers) rather than stopping it.
func TestDiscoveryMovingKeyIsHandedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := loadConfig(t, `
scrape_configs:
  - job_name: app
    relabel_configs:
      - source_labels: [__meta_path]
        target_label: __metrics_path__
`)
		sc, _ := cfg.GetScrapeConfigs()
		with := func(tl model.LabelSet, path string) model.LabelSet {
			out := maps.Clone(tl)
			out["__meta_path"] = model.LabelValue(path)
			return out
		}
		both := ring.New([]string{"a", "b"}, 0)
		base := movingTarget(t, both, "a", "b",
			func(tl model.LabelSet) (uint64, error) { return keyUnder(sc[0])(with(tl, "/x")) },
			func(tl model.LabelSet) (uint64, error) { return keyUnder(sc[0])(with(tl, "/y")) })
		before := tsets{"app": {{Source: "s", Targets: []model.LabelSet{with(base, "/x")}}}}
		after := tsets{"app": {{Source: "s", Targets: []model.LabelSet{with(base, "/y")}}}}

		// New owner b: peers "released" everything, still it waits the delay.
		ho := &recordingHandoff{released: true}
		hb := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho}, nil, cfg)
		hb.f.SetRing(both, "b", 1, true)
		hb.send(t, before)
		if o, ok := readNow(t, hb); !ok || count(o) != 0 {
			t.Fatalf("b owns the target before the move: %v", o)
		}
		hb.send(t, after)
		if o, ok := readNow(t, hb); ok && count(o) != 0 {
			t.Fatal("b started a target whose key discovery moved from a without the hand-off delay")
		}
		time.Sleep(2 * time.Second)
		if o, ok := readNow(t, hb); !ok || count(o) != 1 {
			t.Fatalf("moved target not started after the hand-off delay: %v", o)
		}

		// Old owner a: the old unit is fenced, its staleness markers off.
		hoA := &recordingHandoff{released: true}
		mgr := &oneTargetMgr{}
		ha := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: hoA}, mgr, cfg)
		ha.f.SetRing(both, "a", 1, true)
		ha.send(t, before)
		o, ok := readNow(t, ha)
		if !ok || count(o) != 1 {
			t.Fatalf("a does not own the target before the move: %v", o)
		}
		running := o["app"][0].Targets[0]
		_, _, final, err := KeyFor(nil, sc[0], running, nil)
		if err != nil {
			t.Fatal(err)
		}
		mgr.set("app", promscrape.NewTarget(final, sc[0], running, nil))
		u, _ := ParseUnit(string(running[UnitLabel]))
		hoA.take()
		ha.send(t, after)
		if o, ok := readNow(t, ha); !ok || count(o) != 0 {
			t.Fatalf("a still owns the target after the move: %v", o)
		}
		disabled := mgr.disabledCount()
		mgr.set("app", nil)
		synctest.Wait()
		if _, fenced, _ := hoA.take(); !slices.Contains(fenced, u) {
			t.Errorf("old unit %v not fenced after discovery moved it (fenced %v)", u, fenced)
		}
		if disabled != 1 {
			t.Errorf("staleness markers disabled for %d targets, want the moved one", disabled)
		}
	})
}

// A target whose key changes but stays on this node does not wait for the
// peers: no one else was scraping it. It starts as soon as this node has
// fenced its old key, so that the two loops never append the same series
// together.
func TestReloadMovingKeyLocallyStartsOnceItsOldKeyIsFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg1 := loadConfig(t, "scrape_configs:\n  - job_name: app\n    metrics_path: /x\n")
		cfg2 := loadConfig(t, "scrape_configs:\n  - job_name: app\n    metrics_path: /y\n")
		sc1, _ := cfg1.GetScrapeConfigs()
		sc2, _ := cfg2.GetScrapeConfigs()
		both := ring.New([]string{"a", "b"}, 0)
		tl := movingTarget(t, both, "a", "a", keyUnder(sc1[0]), keyUnder(sc2[0]))
		ho := &configHandoff{released: ConfigID(sc1)}
		h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho}, nil, cfg1)
		h.f.SetRing(both, "a", 1, true)
		h.send(t, tsets{"app": {{Source: "s", Targets: []model.LabelSet{tl}}}})
		if o, ok := readNow(t, h); !ok || count(o) != 1 {
			t.Fatalf("a does not own the target: %v", o)
		}
		ho.take()
		start := time.Now()
		if err := h.f.ApplyConfig(cfg2); err != nil {
			t.Fatal(err)
		}
		// Not released under cfg2 (the peer has not reloaded): a brand-new
		// key would wait, but this one's series was a's own.
		if o, ok := readNow(t, h); !ok || count(o) != 0 {
			t.Fatalf("old key not stopped first: %v", o)
		}
		if o, ok := readNow(t, h); !ok || count(o) != 1 {
			t.Fatalf("target whose key moved within a not passed on once its old key was fenced: %v", o)
		}
		if waited := time.Since(start); waited >= testHandoffDelay {
			t.Fatalf("started after %v, the hand-off delay", waited)
		}
		calls, fenced, activated := ho.take()
		if len(fenced) != 1 || len(activated) != 1 || !slices.Equal(calls[:3], []string{"fence", "fenced", "activate"}) {
			t.Fatalf("calls %v (fenced %v, activated %v), want the old key fenced and announced before the new one is activated", calls, fenced, activated)
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
