package scrape

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/ring"
)

// placedAfter merges one discovery update into a participant's filter,
// re-filters, and reports Waiting's placed.
func placedAfter(t *testing.T, f *Filter, update tsets) bool {
	t.Helper()
	f.merge(update)
	f.refilter(time.Now())
	_, placed := f.Waiting()
	return placed
}

func participantFilter(t *testing.T) *Filter {
	t.Helper()
	f := newFilter(t, FilterOptions{}, nil, nil, nil)
	if err := f.ApplyConfig(loadConfig(t, twoJobs)); err != nil {
		t.Fatal(err)
	}
	f.SetRing(ring.New([]string{"a"}, 0), "a", 1, true)
	return f
}

// Prometheus' discovery manager sends an empty list for every job as it
// starts, before its discoverers report: a replica that counted that as
// its targets placed was ready before it knew them, and a rolling update
// stopped the next replica while its targets still waited.
func TestWaitingIsNotPlacedOnTheDiscoveryManagersFirstEmptyUpdate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := participantFilter(t)
		if placedAfter(t, f, tsets{"node": {}, "app": {}}) {
			t.Fatal("placed on an update without target groups")
		}
		time.Sleep(DiscoverySettle / 2)
		if !placedAfter(t, f, discovery(20, "node", "app")) {
			t.Fatal("not placed once the targets came")
		}
	})
}

// A job that has no targets at all looks like one whose discoverer has not
// reported: its empty list is believed after DiscoverySettle.
func TestWaitingBelievesAnEmptyDiscoveryAfterItSettled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := participantFilter(t)
		if placedAfter(t, f, tsets{"node": {}, "app": {}}) {
			t.Fatal("placed on an update without target groups")
		}
		time.Sleep(DiscoverySettle - time.Millisecond)
		if _, placed := f.Waiting(); placed {
			t.Fatal("placed before the empty update settled")
		}
		time.Sleep(time.Millisecond)
		if _, placed := f.Waiting(); !placed {
			t.Fatalf("not placed %v after an empty update", DiscoverySettle)
		}
	})
}

// A job that had targets and lost them all is discovered: only the first
// updates wait to settle.
func TestWaitingIsPlacedWhenAJobLosesEveryTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := participantFilter(t)
		if !placedAfter(t, f, discovery(20, "node", "app")) {
			t.Fatal("not placed with targets")
		}
		if !placedAfter(t, f, tsets{"node": {}, "app": {}}) {
			t.Fatal("not placed once every target went")
		}
	})
}
