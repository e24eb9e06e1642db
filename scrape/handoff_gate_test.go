package scrape

import (
	"context"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/shoal-dev/shoal/placement/gate"
	"github.com/shoal-dev/shoal/ring"
)

// recordingHandoff is a Handoff whose Released and Contested answers the
// test sets; it records the calls in order. Admit runs the placement
// package's gate on those answers, as production does, and like the
// placement Coordinator it counts the view of the last Fenced as this
// node's fence, and asks the filter to re-check when that view changes.
type recordingHandoff struct {
	gate      *gate.Gate // made at the first Admit, with reg
	reg       *prometheus.Registry
	changes   chan struct{} // Changes; made at the first use
	mu        sync.Mutex
	released  bool
	contested bool
	delay     time.Duration // 0: testHandoffDelay
	calls     []string
	fenced    []Unit
	activated []Unit
	// configured are the (cur, prev) pairs of Configured, in order.
	configured [][2]uint64
	// fencedView and fencedConfig are the last Fenced's view.
	fencedView   Placement
	fencedConfig uint64
}

func (h *recordingHandoff) Fence(_ context.Context, units []Unit) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, "fence")
	h.fenced = append(h.fenced, units...)
	return nil
}

func (h *recordingHandoff) Fenced(r Placement, config uint64, _ bool) {
	h.mu.Lock()
	h.calls = append(h.calls, "fenced")
	changed := h.fencedView != r || h.fencedConfig != config
	h.fencedView, h.fencedConfig = r, config
	h.mu.Unlock()
	if changed {
		h.recheck()
	}
}

// SelfFenced reports whether the last Fenced was of the view r, config.
func (h *recordingHandoff) SelfFenced(r Placement, config uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fencedView == r && h.fencedConfig == config
}

func (h *recordingHandoff) Released(Placement, uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.released
}

// testHandoffDelay stands for placement.DefaultHandoffDelay, which this
// package's tests cannot import.
const testHandoffDelay = 2 * time.Second

func (h *recordingHandoff) Delay() time.Duration {
	if h.delay == 0 {
		return testHandoffDelay
	}
	return h.delay
}

// Contested answers what the test set with contest.
func (h *recordingHandoff) Contested(Placement, uint64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.contested
}

func (h *recordingHandoff) contest(contested bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.contested = contested
}

func (h *recordingHandoff) Activate(_ Placement, _ uint64, units []Unit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, "activate")
	h.activated = append(h.activated, units...)
}

// Configured records the configuration ids the filter announces.
func (h *recordingHandoff) Configured(cur, prev uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.configured = append(h.configured, [2]uint64{cur, prev})
}

// Changes is signalled by recheck. The test drives the view with SetRing:
// View gives none.
func (h *recordingHandoff) Changes() <-chan struct{} { return h.changesCh() }

func (h *recordingHandoff) View() (View, uint64) { return View{}, 0 }

func (h *recordingHandoff) changesCh() chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.changes == nil {
		h.changes = make(chan struct{}, 1)
	}
	return h.changes
}

// recheck tells the Filter that the answers may have changed, as the
// placement package does.
func (h *recordingHandoff) recheck() {
	select {
	case h.changesCh() <- struct{}{}:
	default:
	}
}

// viewAnswers is what the gate asks of a test Handoff.
type viewAnswers interface {
	SelfFenced(r Placement, config uint64) bool
	Released(r Placement, config uint64) bool
	Contested(r Placement, config uint64) bool
}

// viewPeers answers the gate for one view.
type viewPeers struct {
	a      viewAnswers
	r      Placement
	config uint64
}

func (v viewPeers) Fenced() bool   { return v.a.SelfFenced(v.r, v.config) }
func (v viewPeers) Released() bool { return v.a.Released(v.r, v.config) }
func (v viewPeers) Contested(gate.Candidate, time.Time) (bool, time.Time) {
	return v.a.Contested(v.r, v.config), time.Time{}
}

func (h *recordingHandoff) Admit(now time.Time, r Placement, config uint64, cands []gate.Candidate) gate.Admission {
	return h.admit(now, r, config, cands, h)
}

// admit runs the gate with a's answers (a type that embeds
// recordingHandoff passes itself).
func (h *recordingHandoff) admit(now time.Time, r Placement, config uint64, cands []gate.Candidate, a viewAnswers) gate.Admission {
	h.mu.Lock()
	if h.gate == nil {
		h.reg = prometheus.NewRegistry()
		g, err := gate.New(h.Delay(), nil, h.reg)
		if err != nil {
			panic(err)
		}
		h.gate = g
	}
	g := h.gate
	h.mu.Unlock()
	return g.Admit(now, config, cands, viewPeers{a: a, r: r, config: config})
}

// gateTimeouts is the gate's shoal_handoff_delay_expired_total.
func (h *recordingHandoff) gateTimeouts(t *testing.T) float64 {
	t.Helper()
	h.mu.Lock()
	reg := h.reg
	h.mu.Unlock()
	if reg == nil {
		return 0
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "shoal_handoff_delay_expired_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("shoal_handoff_delay_expired_total not registered")
	return 0
}

func (h *recordingHandoff) set(released bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.released = released
}

func (h *recordingHandoff) take() (calls []string, fenced, activated []Unit) {
	h.mu.Lock()
	defer h.mu.Unlock()
	calls, fenced, activated = h.calls, h.fenced, h.activated
	h.calls, h.fenced, h.activated = nil, nil, nil
	return calls, fenced, activated
}

func readNow(t *testing.T, h *harness) (tsets, bool) {
	t.Helper()
	synctest.Wait()
	select {
	case o := <-h.out:
		return o, true
	default:
		return nil, false
	}
}

func TestHandoffGatesGainedAndFencesLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := loadConfig(t, twoJobs)
		ho := &recordingHandoff{}
		h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho}, nil, cfg)
		onlyB := ring.New([]string{"b"}, 0)
		h.f.SetRing(onlyB, "a", 1, true)
		h.send(t, discovery(100, "node"))
		if o, ok := readNow(t, h); !ok || count(o) != 0 {
			t.Fatalf("first output: %v %v", ok, o)
		}
		if calls, _, _ := ho.take(); len(calls) == 0 || calls[len(calls)-1] != "fenced" {
			t.Fatalf("no Fenced after a re-filter: %v", calls)
		}

		// Gained, but a peer has not fenced yet: held back.
		both := ring.New([]string{"a", "b"}, 0)
		h.f.SetRing(both, "a", 1, true)
		if o, ok := readNow(t, h); ok && count(o) != 0 {
			t.Fatalf("gained targets passed on before Released: %d", count(o))
		}
		waiting := 0
		for _, ti := range h.f.Targets() {
			if ti.DropReason == ReasonWaitingHandoff {
				waiting++
			}
		}
		if waiting == 0 {
			t.Fatal("no target waiting for hand-off")
		}
		ho.take()

		// The peer fenced: a recheck starts them, activated before passed on.
		ho.set(true)
		ho.recheck()
		synctest.Wait()
		calls, _, activated := ho.take()
		if len(activated) != waiting || calls[0] != "activate" {
			t.Fatalf("activated %d units (calls %v), want %d first", len(activated), calls, waiting)
		}
		o, ok := readNow(t, h)
		if !ok || count(o) != waiting {
			t.Fatalf("passed on %d after release, want %d", count(o), waiting)
		}
		for _, g := range o["node"] {
			for _, tl := range g.Targets {
				u, err := ParseUnit(string(tl[UnitLabel]))
				if err != nil || u.Rank != 0 {
					t.Fatalf("target %v: unit label %q: %v", tl[model.AddressLabel], tl[UnitLabel], err)
				}
				if _, ok := tl["replica"]; ok {
					t.Fatal("replica label set with replication factor 1")
				}
			}
		}
		if v := ho.gateTimeouts(t); v != 0 {
			t.Fatalf("delay expired counted %v times", v)
		}

		// Lost again: the scrape manager gets the target set without them
		// before they are fenced, and the fence before it is announced.
		h.f.SetRing(onlyB, "a", 1, true)
		synctest.Wait()
		if calls, _, _ := ho.take(); len(calls) != 0 {
			t.Fatalf("fenced before the scrape manager took the new targets: %v", calls)
		}
		if o, ok := readNow(t, h); !ok || count(o) != 0 {
			t.Fatalf("output after losing everything: %v", o)
		}
		synctest.Wait()
		calls, fenced, _ := ho.take()
		if len(fenced) != waiting || len(calls) != 2 || calls[0] != "fence" || calls[1] != "fenced" {
			t.Fatalf("calls %v fenced %d, want fence of %d then fenced", calls, len(fenced), waiting)
		}

		// Gained while the peer never fences: the delay is the bound.
		ho.set(false)
		h.f.SetRing(both, "a", 1, true)
		synctest.Wait()
		time.Sleep(1900 * time.Millisecond)
		if o, ok := readNow(t, h); ok && count(o) != 0 {
			t.Fatal("passed on before the hand-off delay")
		}
		time.Sleep(200 * time.Millisecond)
		if o, ok := readNow(t, h); !ok || count(o) != waiting {
			t.Fatalf("not passed on after the hand-off delay: %v", ok)
		}
		if v := ho.gateTimeouts(t); v != float64(waiting) {
			t.Fatalf("shoal_handoff_delay_expired_total = %v, want %d", v, waiting)
		}
	})
}

// One view change can both lose targets and gain some (here a loses keys
// to c and gains b's, which left). The gained ones start only after the
// lost ones are fenced and the fence is announced: their remote-write hold
// then lies after the lost targets' last samples, which c holds for.
func TestGainedStartAfterTheLostOfTheSameChangeAreFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := loadConfig(t, twoJobs)
		ho := &recordingHandoff{released: true}
		h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho}, nil, cfg)
		h.f.SetRing(ring.New([]string{"a", "b"}, 0), "a", 1, true)
		h.send(t, discovery(200, "node"))
		o, ok := readNow(t, h)
		if !ok {
			t.Fatal("no output for the first view")
		}
		before := count(o)
		ho.take()

		h.f.SetRing(ring.New([]string{"a", "c"}, 0), "a", 1, true)
		var last tsets
		for o, ok := readNow(t, h); ok; o, ok = readNow(t, h) {
			last = o
		}
		calls, fenced, activated := ho.take()
		if len(fenced) == 0 || len(activated) == 0 {
			t.Fatalf("the change lost %d and gained %d units; the test needs both", len(fenced), len(activated))
		}
		if i, j := slices.Index(calls, "fenced"), slices.Index(calls, "activate"); i < 0 || j < i || slices.Index(calls, "fence") > i {
			t.Fatalf("calls %v: want the lost units fenced and the fence announced before any gained unit is activated", calls)
		}
		if got, want := count(last), before-len(fenced)+len(activated); got != want {
			t.Fatalf("passed on %d targets in the end, want %d", got, want)
		}
	})
}

// While the Handoff says a peer may still be scraping gained targets
// (Contested: it follows another placement), the hand-off delay does not
// start them: they wait, without a timer spinning, until Released or until
// the contest ends, and only then are they activated and passed on.
func TestContestedTargetsWaitPastTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := loadConfig(t, twoJobs)
		ho := &recordingHandoff{}
		h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho}, nil, cfg)
		h.f.SetRing(ring.New([]string{"b"}, 0), "a", 1, true)
		h.send(t, discovery(100, "node"))
		if o, ok := readNow(t, h); !ok || count(o) != 0 {
			t.Fatalf("first output: %v %v", ok, o)
		}
		ho.contest(true)
		h.f.SetRing(ring.New([]string{"a", "b"}, 0), "a", 1, true)
		synctest.Wait()
		ho.take()
		refilters := func() int {
			h.f.mu.Lock()
			defer h.f.mu.Unlock()
			return h.f.refilters
		}
		time.Sleep(10 * time.Second)
		if o, ok := readNow(t, h); ok && count(o) != 0 {
			t.Fatalf("%d contested targets started on the hand-off delay", count(o))
		}
		if _, _, activated := ho.take(); len(activated) != 0 {
			t.Fatalf("%d contested units activated", len(activated))
		}
		before := refilters()
		time.Sleep(10 * time.Second)
		if n := refilters() - before; n != 0 {
			t.Fatalf("%d re-filters in 10s without a recheck: a timer spins on the overdue targets", n)
		}
		waiting := 0
		for _, ti := range h.f.Targets() {
			if ti.DropReason == ReasonWaitingHandoff {
				waiting++
			}
		}
		if waiting == 0 {
			t.Fatal("no target waiting for hand-off")
		}

		// The peer caught up with this placement, but has not fenced this
		// view (another configuration): the delay, long past, starts them.
		ho.contest(false)
		ho.recheck()
		synctest.Wait()
		if _, _, activated := ho.take(); len(activated) != waiting {
			t.Fatalf("activated %d units once uncontested, want %d", len(activated), waiting)
		}
		if o, ok := readNow(t, h); !ok || count(o) != waiting {
			t.Fatalf("passed on %v once uncontested, want %d", count(o), waiting)
		}
		if v := ho.gateTimeouts(t); v != float64(waiting) {
			t.Fatalf("shoal_handoff_delay_expired_total = %v, want %d", v, waiting)
		}
	})
}

func TestReplicaLabelCarriesRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := loadConfig(t, twoJobs)
		ho := &recordingHandoff{released: true}
		h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: ho, ReplicaLabel: "replica"}, nil, cfg)
		r := ring.New([]string{"a", "b", "c"}, 0)
		h.f.SetRing(r, "a", 2, true)
		h.send(t, discovery(60, "node"))
		o, ok := readNow(t, h)
		if !ok || count(o) == 0 {
			t.Fatal("nothing passed on")
		}
		ranks := map[string]int{}
		for _, g := range o["node"] {
			for _, tl := range g.Targets {
				u, err := ParseUnit(string(tl[UnitLabel]))
				if err != nil {
					t.Fatal(err)
				}
				if want := string(rune('0' + u.Rank)); string(tl["replica"]) != want {
					t.Fatalf("replica label %q, unit rank %d", tl["replica"], u.Rank)
				}
				if owners := r.Owners(u.Key, 2, nil); owners[u.Rank] != "a" {
					t.Fatalf("rank %d but owners %v", u.Rank, owners)
				}
				ranks[string(tl["replica"])]++
			}
		}
		if ranks["0"] == 0 || ranks["1"] == 0 {
			t.Fatalf("ranks seen: %v, want both 0 and 1", ranks)
		}
	})
}

// A gained target's wait is bounded by the Handoff's Delay (the placement
// package owns --cluster.handoff-delay and its default), and without a
// Handoff (clustering disabled) nothing is held back: the filter has no
// delay of its own.
func TestGateBoundIsTheHandoffsDelay(t *testing.T) {
	cfg := loadConfig(t, twoJobs)
	onlyB, both := ring.New([]string{"b"}, 0), ring.New([]string{"a", "b"}, 0)
	t.Run("with a Handoff", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			const delay = 700 * time.Millisecond
			h := startFilter(t, FilterOptions{RingCoalesce: -1, Handoff: &recordingHandoff{delay: delay}}, nil, cfg)
			h.f.SetRing(onlyB, "a", 1, true)
			h.send(t, discovery(100, "node"))
			if o, ok := readNow(t, h); !ok || count(o) != 0 {
				t.Fatalf("first output: %v %v", ok, o)
			}
			h.f.SetRing(both, "a", 1, true)
			time.Sleep(delay - time.Millisecond)
			if o, ok := readNow(t, h); ok && count(o) != 0 {
				t.Fatalf("gained targets passed on before the Handoff's %v delay", delay)
			}
			time.Sleep(time.Millisecond)
			if o, ok := readNow(t, h); !ok || count(o) == 0 {
				t.Fatalf("gained targets not passed on at the Handoff's %v delay", delay)
			}
		})
	})
	t.Run("without a Handoff", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			h := startFilter(t, FilterOptions{RingCoalesce: -1}, nil, cfg)
			h.f.SetRing(onlyB, "a", 1, true)
			h.send(t, discovery(100, "node"))
			if o, ok := readNow(t, h); !ok || count(o) != 0 {
				t.Fatalf("first output: %v %v", ok, o)
			}
			start := time.Now()
			h.f.SetRing(both, "a", 1, true)
			o, ok := readNow(t, h)
			if !ok || count(o) == 0 || time.Since(start) >= time.Second {
				t.Fatalf("gained targets held back without a Handoff (passed on: %v, after %v)", ok, time.Since(start))
			}
			for _, ti := range h.f.Targets() {
				if ti.DropReason == ReasonWaitingHandoff {
					t.Fatalf("target %s waits for a hand-off without a Handoff", ti.ScrapeURL)
				}
			}
		})
	})
}
