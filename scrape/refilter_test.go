package scrape

import (
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/placement/gate"
	"github.com/shoal-dev/shoal/ring"
)

// Unit tests of refilter's steps, each on a hand-built pass.

// stepFilter is a Filter with twoJobs' configuration and n discovered
// node targets, relabelled (recomputeKeys) and known (rebuildKnown) under
// the view s, as at the start of a pass.
func stepFilter(t *testing.T, ho Handoff, n int, s ringState) (*Filter, *pass) {
	t.Helper()
	f := newFilter(t, FilterOptions{Handoff: ho}, nil, nil, nil)
	if err := f.ApplyConfig(loadConfig(t, twoJobs)); err != nil {
		t.Fatal(err)
	}
	f.merge(discovery(n, "node"))
	f.latest = s
	p := &pass{now: time.Now(), prev: f.applied, cur: f.latest}
	f.recomputeKeys(p)
	f.rebuildKnown(p)
	return f, p
}

func keysOf(f *Filter) []uint64 {
	var keys []uint64
	f.eachValid(func(_ string, e entry) { keys = append(keys, e.key) })
	return keys
}

// A ring change alone reuses the known keys; discovery rebuilds them.
func TestRebuildKnownOnlyAfterDiscoveryOrConfiguration(t *testing.T) {
	f, p := stepFilter(t, nil, 20, ringState{rf: 1, participant: true})
	if len(p.known) != 20 || len(p.series) != 20 || !p.changed {
		t.Fatalf("first pass: %d known, %d series, changed %v", len(p.known), len(p.series), p.changed)
	}
	f.known, f.series = p.known, p.series
	q := &pass{cur: ringState{ring: ring.New([]string{"a"}, 0), self: "a", rf: 1, participant: true}}
	f.recomputeKeys(q)
	f.rebuildKnown(q)
	if q.changed || !maps.Equal(q.known, f.known) {
		t.Fatalf("a ring change recomputed keys (changed %v)", q.changed)
	}
}

// candidate tells the gate how a gained target moved: not at all when its
// key was known, from a peer when its series ran under a key a peer owned,
// here when this node alone scraped it, and not at all when this node was
// not a participant.
func TestCandidateTellsHowATargetMoved(t *testing.T) {
	ab := ring.New([]string{"a", "b"}, 0)
	f, p := stepFilter(t, nil, 1, ringState{ring: ab, self: "a", rf: 1, participant: true})
	var e entry
	f.eachValid(func(_ string, x entry) { e = x })
	const gone = 12345 // the key the series ran under before
	for _, tc := range []struct {
		name  string
		known bool
		prev  ringState
		want  gate.Move
	}{
		{name: "known key", known: true, prev: ringState{ring: ab, self: "a", rf: 1, participant: true}, want: gate.NotMoved},
		{name: "moved from a peer", prev: ringState{ring: ring.New([]string{"b"}, 0), self: "a", rf: 1, participant: true}, want: gate.MovedFromPeer},
		{name: "moved here", prev: ringState{ring: ring.New([]string{"a"}, 0), self: "a", rf: 1, participant: true}, want: gate.MovedHere},
		{name: "moved while a viewer", prev: ringState{ring: ring.New([]string{"a"}, 0), self: "a", rf: 1}, want: gate.NotMoved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.series = map[uint64]uint64{e.series: gone}
			f.known = map[uint64]struct{}{}
			if tc.known {
				f.known[e.key] = struct{}{}
			}
			p.prev = tc.prev
			c := f.candidate(p, e, 0)
			if c.Move != tc.want || c.Known != tc.known || c.Key != e.key {
				t.Fatalf("candidate %+v, want move %v known %v", c, tc.want, tc.known)
			}
		})
	}
}

// decideOwned keeps what this node scrapes at the same rank without asking
// the gate, asks it about every other key it owns, and applies the answer:
// started keys are owned and activated, counted as moved in when known,
// the others wait.
func TestDecideOwnedAsksTheGateOnlyAboutGainedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ho := &recordingHandoff{}
		f, p := stepFilter(t, ho, 20, ringState{rf: 1, participant: true})
		keys := keysOf(f)
		kept := keys[0]
		f.owned = map[uint64]int{kept: 0}
		f.known = p.known
		f.decideOwned(p)
		if len(p.cands) != 19 || slices.ContainsFunc(p.cands, func(c gate.Candidate) bool { return c.Key == kept }) {
			t.Fatalf("%d candidates, want the 19 keys not kept", len(p.cands))
		}
		if len(p.owned) != 1 || len(p.waiting) != 19 || len(p.activated) != 0 || p.next.IsZero() {
			t.Fatalf("unreleased: owned %d waiting %d activated %d next %v", len(p.owned), len(p.waiting), len(p.activated), p.next)
		}
		ho.set(true)
		q := &pass{now: time.Now(), prev: f.applied, cur: f.latest, known: p.known, series: p.series}
		f.decideOwned(q)
		if len(q.owned) != 20 || len(q.waiting) != 0 || len(q.activated) != 19 || q.movedIn != 19 {
			t.Fatalf("released: owned %d waiting %d activated %d moved in %d", len(q.owned), len(q.waiting), len(q.activated), q.movedIn)
		}
	})
}

// Without a Handoff (clustering disabled) every owned key starts at once.
func TestAdmitWithoutHandoffStartsEverything(t *testing.T) {
	f, p := stepFilter(t, nil, 20, ringState{rf: 1, participant: true})
	f.decideOwned(p)
	if len(p.owned) != 20 || len(p.waiting) != 0 || len(p.activated) != 0 || p.movedIn != 0 {
		t.Fatalf("owned %d waiting %d activated %d moved in %d", len(p.owned), len(p.waiting), len(p.activated), p.movedIn)
	}
}

// keep marks a key whose URL changed under the same series for a new
// scrape loop; a changed series is a different target.
func TestKeepMarksANewURLForANewLoop(t *testing.T) {
	f, p := stepFilter(t, nil, 1, ringState{rf: 1, participant: true})
	p.owned, p.ownedSeries, p.ownedURL = map[uint64]int{}, map[uint64]uint64{}, map[uint64]string{}
	var e entry
	f.eachValid(func(_ string, x entry) { e = x })
	f.ownedURL = map[uint64]string{e.key: "http://old/metrics"}
	f.ownedSeries = map[uint64]uint64{e.key: e.series + 1}
	f.keep(p, e, 0)
	if len(p.rescraped) != 0 || p.owned[e.key] != 0 || p.ownedURL[e.key] != e.url {
		t.Fatalf("another series marked for a new loop: %v", p.rescraped)
	}
	f.ownedSeries[e.key] = e.series
	f.keep(p, e, 0)
	if _, ok := p.rescraped[e.key]; !ok {
		t.Fatal("a new URL of the same series not marked for a new loop")
	}
}

// collectLost hands off the lost keys that are still discovered, under
// their key or (moved) under another, and lets the rest go.
func TestCollectLostHandsOffOnlyWhatIsStillDiscovered(t *testing.T) {
	f := newFilter(t, FilterOptions{}, nil, nil, nil)
	f.owned = map[uint64]int{1: 0, 2: 1, 3: 0, 4: 0}
	f.ownedSeries = map[uint64]uint64{1: 11, 2: 12, 3: 13, 4: 14}
	p := &pass{
		owned:  map[uint64]int{4: 0},
		known:  map[uint64]struct{}{1: {}, 9: {}},
		series: map[uint64]uint64{11: 1, 12: 9},
	}
	f.collectLost(p)
	slices.SortFunc(p.lost, func(a, b Unit) int { return int(a.Key) - int(b.Key) })
	if !slices.Equal(p.lost, []Unit{{Key: 1}, {Key: 2, Rank: 1}}) || len(p.handoff) != 2 || !p.changed {
		t.Fatalf("lost %v handoff %v changed %v, want 1 (still known) and 2 (moved) handed off", p.lost, p.handoff, p.changed)
	}
}
