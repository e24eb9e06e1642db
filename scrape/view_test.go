package scrape

import (
	"sync"
	"testing"
	"testing/synctest"

	"github.com/shoal-dev/shoal/ring"
)

// viewHandoff is a recordingHandoff whose View the test sets.
type viewHandoff struct {
	recordingHandoff
	vmu  sync.Mutex
	view View
	gen  uint64
}

func (h *viewHandoff) View() (View, uint64) {
	h.vmu.Lock()
	defer h.vmu.Unlock()
	return h.view, h.gen
}

// setView publishes v as a new view and signals Changes, as the placement
// package does.
func (h *viewHandoff) setView(v View) {
	h.vmu.Lock()
	h.view = v
	h.gen++
	h.vmu.Unlock()
	h.recheck()
}

// A Filter with a Handoff places targets by the Handoff's View, read when
// Changes is signalled: the Handoff never calls the Filter.
func TestFilterFollowsTheHandoffsView(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ho := &viewHandoff{recordingHandoff: recordingHandoff{released: true}}
		h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho}, nil, loadConfig(t, twoJobs))
		h.f.SetRing(ring.New(nil, 0), "a", 1, false)
		h.send(t, discovery(50, "node"))
		if o, ok := readNow(t, h); !ok || count(o) != 0 {
			t.Fatalf("before the first view: %v %v", ok, o)
		}
		ho.setView(View{Placement: ring.New([]string{"a"}, 0), Self: "a", ReplicationFactor: 1, Participant: true,
			KubeNodes: map[string]string{"a": "n1"}, PlaceBy: 7})
		if o, ok := readNow(t, h); !ok || count(o) != 50 {
			t.Fatalf("the view makes a the only participant: passed on %v", count(o))
		}
		h.f.mu.Lock()
		kube, placeBy := h.f.latest.kube, h.f.latest.placeBy
		h.f.mu.Unlock()
		if kube == nil || kube.byPeer["a"] != "n1" || placeBy != 7 {
			t.Fatalf("the view's Kubernetes nodes %v or placement configuration %d not followed", kube, placeBy)
		}
		// A signal without a new view changes nothing.
		ho.recheck()
		if o, ok := readNow(t, h); ok {
			t.Fatalf("a signal without a new view passed on %d targets", count(o))
		}
		ho.setView(View{Placement: ring.New([]string{"a"}, 0), Self: "a", ReplicationFactor: 1})
		if o, ok := readNow(t, h); !ok || count(o) != 0 {
			t.Fatalf("a view without participation: passed on %v", count(o))
		}
	})
}
