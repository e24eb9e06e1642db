package scrape

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/shoal-dev/shoal/ring"
)

// While the cluster still places targets by the configuration this node ran
// before its reload, a change that moves keys (the metrics path here) moves
// nothing: the target stays with its owner under its kept key, only its
// scrape loop is replaced (no staleness markers: the new loop continues the
// series), and a job the change adds waits. When the cluster switches,
// every key moves in one re-filter: the target goes to its new owner
// through a fence, the new job is placed, and the kept configuration is
// forgotten.
func TestPlacesByKeptConfigurationUntilClusterSwitches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const before = "scrape_configs:\n  - job_name: app\n    metrics_path: /x\n"
		const after = "scrape_configs:\n  - job_name: app\n    metrics_path: /y\n  - job_name: added\n"
		cfg1, cfg2 := loadConfig(t, before), loadConfig(t, after)
		sc1, _ := cfg1.GetScrapeConfigs()
		sc2, _ := cfg2.GetScrapeConfigs()
		id1, id2 := ConfigID(sc1), ConfigID(sc2)
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
		h.f.setPlacementConfig(id1)
		h.f.SetRing(both, "a", 1, true)
		h.send(t, tsets{"app": {{Source: "s", Targets: []model.LabelSet{tl}}}, "added": {{Source: "s", Targets: []model.LabelSet{addr(5000)}}}})
		if o, ok := readNow(t, h); !ok || count(o) != 1 {
			t.Fatalf("target not owned before the reload: %v", o)
		}
		mgr.set("app", promscrape.NewTarget(final, sc1[0], nil, nil))
		ho.take()

		if err := h.f.ApplyConfig(cfg2); err != nil {
			t.Fatal(err)
		}
		if got := ho.configuredLast(); got != [2]uint64{id2, id1} {
			t.Fatalf("Configured %x, want loaded %x kept %x", got, id2, id1)
		}
		o, ok := readNow(t, h)
		if !ok || count(tsets{"app": o["app"]}) != 1 || count(tsets{"added": o["added"]}) != 0 {
			t.Fatalf("after the reload, placed by the kept configuration: want the target kept and the added job waiting, got %v", o)
		}
		if u := o["app"][0].Targets[0][UnitLabel]; u != model.LabelValue(Unit{Key: k1}.String()) {
			t.Errorf("unit %s after the reload, want the kept key's %s", u, Unit{Key: k1})
		}
		if mgr.disabledCount() == 0 {
			t.Error("the loop replaced for the new path may write end-of-run staleness markers into the series its successor continues")
		}
		if _, fenced, _ := ho.take(); len(fenced) != 0 {
			t.Errorf("fenced %v although the owner stayed", fenced)
		}
		if r := reasonOf(h.f, "added"); r != ReasonNotPlaced {
			t.Errorf("added job's target: reason %q, want %q", r, ReasonNotPlaced)
		}

		// Every participant runs the new configuration: the cluster places by it.
		h.f.setPlacementConfig(id2)
		o, ok = readNow(t, h)
		if !ok || count(tsets{"app": o["app"]}) != 0 {
			t.Fatalf("target still owned after the switch moved its key to b: %v", o)
		}
		time.Sleep(2 * StopWait)
		synctest.Wait()
		if _, fenced, _ := ho.take(); !slices.Contains(fenced, Unit{Key: k1}) {
			t.Errorf("kept key's unit not fenced when the switch moved the target to b (fenced %v)", fenced)
		}
		if r := reasonOf(h.f, "added"); r == ReasonNotPlaced {
			t.Error("added job still not placed after the switch")
		}
		if got := ho.configuredLast(); got != [2]uint64{id2, 0} {
			t.Errorf("Configured %x after the switch, want the kept configuration forgotten", got)
		}
	})
}

// A second change loaded while the cluster still places by the kept
// configuration keeps that one (the cluster's), and loading the kept
// configuration again (a change rolled back) keeps nothing.
func TestKeptConfigurationIsTheOneTheClusterPlacesBy(t *testing.T) {
	cfgs := []string{
		"scrape_configs:\n  - job_name: app\n    metrics_path: /x\n",
		"scrape_configs:\n  - job_name: app\n    metrics_path: /y\n",
		"scrape_configs:\n  - job_name: app\n    metrics_path: /z\n",
	}
	ho := &recordingHandoff{}
	f := newFilter(t, FilterOptions{Handoff: ho}, nil, nil, nil)
	var ids []uint64
	for _, c := range cfgs {
		cfg := loadConfig(t, c)
		sc, _ := cfg.GetScrapeConfigs()
		ids = append(ids, ConfigID(sc))
	}
	apply := func(i int) {
		t.Helper()
		if err := f.ApplyConfig(loadConfig(t, cfgs[i])); err != nil {
			t.Fatal(err)
		}
	}
	apply(0)
	f.setPlacementConfig(ids[0])
	apply(1)
	if got := ho.configuredLast(); got != [2]uint64{ids[1], ids[0]} {
		t.Fatalf("after the first change: %x", got)
	}
	apply(2)
	if got := ho.configuredLast(); got != [2]uint64{ids[2], ids[0]} {
		t.Fatalf("a second change while placing by the kept one: %x, want kept %x", got, ids[0])
	}
	apply(0)
	if got := ho.configuredLast(); got != [2]uint64{ids[0], 0} {
		t.Fatalf("rolled back to the kept configuration: %x, want nothing kept", got)
	}
}

func (h *recordingHandoff) configuredLast() [2]uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.configured) == 0 {
		return [2]uint64{}
	}
	return h.configured[len(h.configured)-1]
}

// reasonOf is the drop reason of the first target of job.
func reasonOf(f *Filter, job string) string {
	for _, ti := range f.Targets() {
		if ti.Job == job {
			return ti.DropReason
		}
	}
	return "no such target"
}
