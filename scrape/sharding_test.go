package scrape

import (
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/discovery/targetgroup"

	"github.com/shoal-dev/shoal/ring"
)

// shardingConfig takes the mode from a discovered label, as a user's
// relabelling would.
const shardingConfig = `
scrape_configs:
  - job_name: app
    relabel_configs:
      - source_labels: [__meta_mode]
        regex: (.+)
        target_label: __shoal_sharding__
`

// shardedTargets: per mode, targets on kube nodes n1..n3, without a node,
// and on a node where no replica runs.
func shardedTargets() tsets {
	g := &targetgroup.Group{Source: "s"}
	i := 0
	add := func(mode, node string) {
		tl := addr(i)
		i++
		if mode != "" {
			tl["__meta_mode"] = model.LabelValue(mode)
		}
		if node != "" {
			tl[KubeNodeLabel] = model.LabelValue(node)
		}
		g.Targets = append(g.Targets, tl)
	}
	for range 5 {
		for _, node := range []string{"n1", "n2", "n3", "", "n9"} {
			for _, mode := range []string{"", ShardingRing, ShardingAll, ShardingNodeLocal} {
				add(mode, node)
			}
		}
	}
	add("bogus", "n1")
	return tsets{"app": {g}}
}

func TestShardingModes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := loadConfig(t, shardingConfig)
		names := []string{"a", "b", "c"}
		kube := map[string]string{"a": "n1", "b": "n2", "c": "n3"}
		r := ring.New(names, 0)
		filters := map[string]*harness{}
		for _, n := range names {
			h := startFilter(t, FilterOptions{RingCoalesce: -1, ReplicaLabel: "replica", Handoff: &recordingHandoff{released: true}}, nil, cfg)
			h.f.setKubeNodes(kube)
			h.f.SetRing(r, n, 1, true)
			h.send(t, shardedTargets())
			filters[n] = h
		}
		// Per target: who scrapes it, with which replica label.
		scrapedBy := map[string][]string{}
		for _, n := range names {
			o, ok := readNow(t, filters[n])
			if !ok {
				t.Fatalf("%s: no output", n)
			}
			for _, g := range o["app"] {
				for _, tl := range g.Targets {
					a := string(tl[model.AddressLabel])
					scrapedBy[a] = append(scrapedBy[a], n)
					if tl["__meta_mode"] == ShardingAll {
						if tl["replica"] != model.LabelValue(n) {
							t.Errorf("%s: all-mode target %s has replica %q, want its node name", n, a, tl["replica"])
						}
					} else if _, ok := tl["replica"]; ok {
						t.Errorf("%s: %s-mode target %s has a replica label with replication factor 1", n, tl["__meta_mode"], a)
					}
				}
			}
		}
		invalid := 0
		for _, ti := range filters["a"].f.Targets() {
			if strings.HasPrefix(ti.DropReason, reasonInvalidPrefix) {
				invalid++
				if !strings.Contains(ti.DropReason, ShardingLabel) {
					t.Errorf("invalid mode reported as %q", ti.DropReason)
				}
				continue
			}
			a := ti.DiscoveredLabels.Get(model.AddressLabel)
			mode, node := ti.DiscoveredLabels.Get("__meta_mode"), ti.DiscoveredLabels.Get(KubeNodeLabel)
			got := slices.Sorted(slices.Values(scrapedBy[a]))
			var want []string
			switch {
			case mode == ShardingAll:
				want = names
			case mode == ShardingNodeLocal && node != "" && node != "n9":
				want = []string{map[string]string{"n1": "a", "n2": "b", "n3": "c"}[node]}
			default: // ring, and node-local without a node or a replica there
				want = r.Owners(ti.Key, 1, nil)
			}
			if !slices.Equal(got, slices.Sorted(slices.Values(want))) {
				t.Errorf("target %s (mode %q, node %q): scraped by %v, want %v", a, mode, node, got, want)
			}
			if !slices.Equal(slices.Sorted(slices.Values(ti.Owners)), slices.Sorted(slices.Values(want))) {
				t.Errorf("target %s (mode %q, node %q): owners %v in the cluster view, want %v", a, mode, node, ti.Owners, want)
			}
		}
		if invalid != 1 {
			t.Errorf("%d invalid targets, want the one with a bad %s", invalid, ShardingLabel)
		}
		if counts := filters["a"].f.OwnedCounts(); counts["a"]+counts["b"]+counts["c"] != len(filters["a"].f.Targets())-1+2*25 {
			t.Errorf("owned counts %v do not count all-mode targets once per node", counts)
		}
	})
}

// drain reads every output the filters have ready until none is left.
func drain(hs ...*harness) {
	for {
		synctest.Wait()
		got := false
		for _, h := range hs {
			select {
			case <-h.out:
				got = true
			default:
			}
		}
		if !got {
			return
		}
	}
}

// ownedAddrs lists the addresses a filter scrapes now.
func ownedAddrs(f *Filter) []string {
	var out []string
	for _, ti := range f.Targets() {
		if ti.Owned {
			out = append(out, ti.DiscoveredLabels.Get(model.AddressLabel))
		}
	}
	return out
}

// A replica replaced on its Kubernetes node (a DaemonSet pod recreated)
// takes its node-local targets over like any gained target: held back
// until the peers have fenced the new ring, the interim owner fences them.
// While two replicas claim one node, exactly one of them scrapes.
func TestNodeLocalReplicaReplaced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := loadConfig(t, shardingConfig)
		target := addr(7)
		target["__meta_mode"] = ShardingNodeLocal
		target[KubeNodeLabel] = "n2"
		disc := tsets{"app": {{Source: "s", Targets: []model.LabelSet{target}}}}
		kube := map[string]string{"a": "n1", "c": "n3", "b2": "n2"}
		withoutB := ring.New([]string{"a", "c"}, 0)
		interim := withoutB.Owners(TargetKeyString("app", "http://"+string(target[model.AddressLabel])+"/metrics"), 1, nil)[0]

		hos := map[string]*recordingHandoff{}
		hs := map[string]*harness{}
		for _, n := range []string{"a", "c", "b2"} {
			hos[n] = &recordingHandoff{released: true}
			hs[n] = startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: hos[n]}, nil, cfg)
			hs[n].f.setKubeNodes(kube)
			hs[n].f.SetRing(withoutB, n, 1, n != "b2")
			hs[n].send(t, disc)
		}
		drain(hs["a"], hs["c"], hs["b2"])
		for _, n := range []string{"a", "c", "b2"} {
			want := 0
			if n == interim {
				want = 1
			}
			if got := ownedAddrs(hs[n].f); len(got) != want {
				t.Fatalf("no replica on n2: %s scrapes %v, want the ring owner %s alone", n, got, interim)
			}
			hos[n].take()
		}

		// b2 (on n2) joins; the peers have not fenced the new ring yet.
		withB2 := ring.New([]string{"a", "c", "b2"}, 0)
		hos["b2"].set(false)
		for _, n := range []string{"a", "c", "b2"} {
			hs[n].f.SetRing(withB2, n, 1, true)
		}
		drain(hs["a"], hs["c"], hs["b2"])
		if got := ownedAddrs(hs["b2"].f); len(got) != 0 {
			t.Fatal("b2 started its node-local target before the interim owner fenced it")
		}
		if _, fenced, _ := hos[interim].take(); len(fenced) != 1 {
			t.Fatalf("interim owner %s fenced %v, want the node-local target", interim, fenced)
		}
		hos["b2"].set(true)
		hos["b2"].recheck()
		drain(hs["b2"])
		if got := ownedAddrs(hs["b2"].f); len(got) != 1 {
			t.Fatal("b2 does not scrape its node's target once released")
		}

		// A second replica on n2 (b3) joins: exactly one of the two scrapes.
		kube["b3"] = "n2"
		withB3 := ring.New([]string{"a", "c", "b2", "b3"}, 0)
		h3 := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: &recordingHandoff{released: true}}, nil, cfg)
		h3.f.setKubeNodes(kube)
		h3.f.SetRing(withB3, "b3", 1, true)
		h3.send(t, disc)
		hs["b2"].f.setKubeNodes(kube)
		hs["b2"].f.SetRing(withB3, "b2", 1, true)
		drain(hs["b2"], h3)
		if n := len(ownedAddrs(hs["b2"].f)) + len(ownedAddrs(h3.f)); n != 1 {
			t.Fatalf("two replicas on n2: the target is scraped %d times, want once", n)
		}
	})
}

// A gained candidate tells the gate whether the ring places it: only then
// can a contending peer's placement say whether that peer may own it.
func TestGainedCandidateSaysWhetherTheRingPlacesIt(t *testing.T) {
	f := &Filter{known: map[uint64]struct{}{1: {}}}
	for mode, want := range map[shardMode]bool{modeRing: true, modeAll: false, modeNodeLocal: false} {
		if c := f.candidate(nil, entry{key: 1, mode: mode}, 0); c.Placed != want {
			t.Errorf("mode %d: Placed = %v, want %v", mode, c.Placed, want)
		}
	}
}
