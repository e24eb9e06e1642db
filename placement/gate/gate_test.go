package gate

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const delay = 2 * time.Second

// peers answers what the test sets and counts the questions.
type peers struct {
	unfenced            bool // this node has not fenced the view yet
	released, contested bool
	// contestedKeys, when set, answers Contested per key instead.
	contestedKeys map[uint64]bool
	// recheck is Contested's recheck; since records what it was asked.
	recheck time.Time
	since   []time.Time
	asked   map[string]int
}

func (p *peers) Fenced() bool {
	p.count("fenced")
	return !p.unfenced
}

func (p *peers) Released() bool {
	p.count("released")
	return p.released
}

func (p *peers) Contested(c Candidate, since time.Time) (bool, time.Time) {
	p.count("contested")
	p.since = append(p.since, since)
	if p.contestedKeys != nil {
		return p.contestedKeys[c.Key], p.recheck
	}
	return p.contested, p.recheck
}

func (p *peers) count(q string) {
	if p.asked == nil {
		p.asked = map[string]int{}
	}
	p.asked[q]++
}

func newGate(t *testing.T) (*Gate, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	g, err := New(delay, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	return g, reg
}

func TestGainedTargetRule(t *testing.T) {
	for _, tc := range []struct {
		name       string
		c          Candidate
		cfgChanged bool
		released   bool
		start      bool
		fixed      bool
	}{
		{name: "released at once starts", released: true, start: true},
		{name: "not released waits for the peers' fences", start: false},
		{name: "moved here goes on at once", c: Candidate{Move: MovedHere}, start: true},
		{name: "moved from a peer by a reload waits for the fences", c: Candidate{Move: MovedFromPeer}, cfgChanged: true, released: true},
		{name: "moved from a peer by discovery waits the whole delay", c: Candidate{Move: MovedFromPeer}, released: true, fixed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				now := time.Now()
				start, w := decideGained(tc.c, now, delay, tc.cfgChanged, &peers{released: tc.released})
				if start != tc.start {
					t.Fatalf("start = %v, want %v", start, tc.start)
				}
				if start {
					return
				}
				if !w.due.Equal(now.Add(delay)) || w.fixed != tc.fixed {
					t.Fatalf("wait %+v, want due after the delay, fixed %v", w, tc.fixed)
				}
			})
		})
	}
}

func TestWaitingTargetRule(t *testing.T) {
	// Times are offsets from the wait's start; its due is at delay.
	for _, tc := range []struct {
		name                       string
		at                         time.Duration
		fixed, released, contested bool
		start, expired             bool
	}{
		{name: "released starts before its due", released: true, start: true},
		{name: "fixed ignores the release until due", fixed: true, released: true},
		{name: "fixed starts at its due", at: delay, fixed: true, released: true, start: true, expired: true},
		{name: "unreleased waits until due", at: delay - time.Millisecond},
		{name: "unreleased starts at its due", at: delay, start: true, expired: true},
		{name: "contested waits past its due", at: delay + time.Hour, contested: true},
		{name: "contested but released starts", at: delay + time.Hour, contested: true, released: true, start: true},
		{name: "fixed is not held by a contest", at: delay, fixed: true, contested: true, start: true, expired: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := wait{due: time.Now().Add(delay), fixed: tc.fixed}
				time.Sleep(tc.at)
				start, expired, _ := decideWaiting(Candidate{}, w, time.Now(), delay, &peers{released: tc.released, contested: tc.contested})
				if start != tc.start || expired != tc.expired {
					t.Fatalf("start, expired = %v, %v; want %v, %v", start, expired, tc.start, tc.expired)
				}
			})
		})
	}
}

// A gained target that no peer releases starts after the delay, counted
// as expired; the answer tells when to ask again.
func TestAdmitHoldsUntilTheDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, reg := newGate(t)
		cands := []Candidate{{Key: 1, Known: true}, {Key: 2, Known: true}}
		p := &peers{}
		a := g.Admit(time.Now(), 7, cands, p)
		if a.Start[0] || a.Start[1] || a.Waiting != 2 {
			t.Fatalf("unreleased targets started: %+v", a)
		}
		if want := time.Now().Add(delay); !a.Next.Equal(want) {
			t.Fatalf("Next = %v, want the delay's end %v", a.Next, want)
		}
		if p.asked["released"] != 1 {
			t.Fatalf("Released asked %d times in one Admit, want once", p.asked["released"])
		}
		time.Sleep(delay - time.Millisecond)
		if a := g.Admit(time.Now(), 7, cands, p); a.Start[0] {
			t.Fatal("started before the delay")
		}
		time.Sleep(time.Millisecond)
		a = g.Admit(time.Now(), 7, cands, p)
		if !a.Start[0] || !a.Start[1] || a.Waiting != 0 || !a.Next.IsZero() {
			t.Fatalf("not started at the delay: %+v", a)
		}
		if v := testutil.ToFloat64(g.timeouts); v != 2 {
			t.Fatalf("shoal_handoff_delay_expired_total = %v, want 2", v)
		}
		if n, err := testutil.GatherAndCount(reg, "shoal_handoff_delay_expired_total"); err != nil || n != 1 {
			t.Fatalf("metric not registered: %d %v", n, err)
		}
	})
}

// Released starts a waiting target at once, not counted as expired.
func TestAdmitStartsOnRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t)
		cands := []Candidate{{Key: 1, Known: true}}
		p := &peers{}
		g.Admit(time.Now(), 7, cands, p)
		time.Sleep(time.Second)
		p.released = true
		if a := g.Admit(time.Now(), 7, cands, p); !a.Start[0] {
			t.Fatal("released target still waits")
		}
		if v := testutil.ToFloat64(g.timeouts); v != 0 {
			t.Fatalf("release counted as an expired delay: %v", v)
		}
	})
}

// A contested target waits past its due with no time to ask again (the
// placement package rechecks when the contest ends), and starts, counted
// as expired, once uncontested.
func TestAdmitContestedWaitsWithoutTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t)
		cands := []Candidate{{Key: 1, Known: true}}
		p := &peers{contested: true}
		g.Admit(time.Now(), 7, cands, p)
		time.Sleep(delay + time.Minute)
		a := g.Admit(time.Now(), 7, cands, p)
		if a.Start[0] || !a.Next.IsZero() {
			t.Fatalf("contested target past its due: %+v, want waiting with no Next", a)
		}
		p.contested = false
		if a := g.Admit(time.Now(), 7, cands, p); !a.Start[0] {
			t.Fatal("uncontested target past its due still waits")
		}
		if v := testutil.ToFloat64(g.timeouts); v != 1 {
			t.Fatalf("shoal_handoff_delay_expired_total = %v, want 1", v)
		}
	})
}

// A contest holds only the targets it is about: past the delay, a target
// no contending peer may scrape starts while the others wait on.
func TestAdmitContestIsPerTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t)
		cands := []Candidate{{Key: 1, Known: true}, {Key: 2, Known: true}}
		p := &peers{contestedKeys: map[uint64]bool{1: true}}
		g.Admit(time.Now(), 7, cands, p)
		time.Sleep(delay)
		a := g.Admit(time.Now(), 7, cands, p)
		if a.Start[0] || !a.Start[1] || a.Waiting != 1 {
			t.Fatalf("past the delay with key 1 contested: %+v, want key 2 started and key 1 waiting", a)
		}
	})
}

// A contested target is asked again at the time its answer may change
// (Admission.Next), and is asked with the time its wait began, which later
// views (another configuration) do not move.
func TestAdmitContestRecheckAndSince(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t)
		cands := []Candidate{{Key: 1, Known: true}}
		began := time.Now()
		p := &peers{contested: true}
		g.Admit(began, 7, cands, p)
		time.Sleep(delay)
		p.recheck = time.Now().Add(5 * time.Second)
		if a := g.Admit(time.Now(), 8, cands, p); a.Start[0] || !a.Next.Equal(p.recheck) {
			t.Fatalf("contested with a recheck: %+v, want waiting with Next %v", a, p.recheck)
		}
		if len(p.since) != 1 || !p.since[0].Equal(began) {
			t.Fatalf("Contested asked with since %v, want the wait's start %v", p.since, began)
		}
	})
}

// Each Admit replaces the waiting set: a key gone from the candidates (lost
// again) forgets its wait, and a key gained at another rank waits anew.
func TestAdmitForgetsWaitsNotAskedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t)
		p := &peers{}
		g.Admit(time.Now(), 7, []Candidate{{Key: 1}, {Key: 2}}, p)
		time.Sleep(time.Second)
		g.Admit(time.Now(), 7, []Candidate{{Key: 2, Rank: 1}}, p)
		time.Sleep(time.Second)
		a := g.Admit(time.Now(), 7, []Candidate{{Key: 1}, {Key: 2, Rank: 1}}, p)
		if a.Start[0] || a.Start[1] {
			t.Fatalf("a wait survived: %+v", a)
		}
		if want := time.Now().Add(delay - time.Second); !a.Next.Equal(want) {
			t.Fatalf("Next = %v, want the earliest due %v", a.Next, want)
		}
	})
}

// A target moved from a peer under the view's configuration of the last
// Admit moved by discovery: the peers' release does not start it; under a
// new configuration it does.
func TestAdmitTellsDiscoveryMovesFromReloads(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t)
		p := &peers{released: true}
		g.Admit(time.Now(), 7, nil, p)
		moved := []Candidate{{Key: 1, Move: MovedFromPeer}}
		g.Admit(time.Now(), 7, moved, p)
		if a := g.Admit(time.Now(), 7, moved, p); a.Start[0] {
			t.Fatal("a key moved by discovery started on the peers' release")
		}
		g, _ = newGate(t)
		g.Admit(time.Now(), 7, nil, p)
		g.Admit(time.Now(), 8, moved, p)
		if a := g.Admit(time.Now(), 8, moved, p); !a.Start[0] {
			t.Fatal("a key moved by a reload not started on the peers' release")
		}
	})
}

func TestNewRefusesNoDelay(t *testing.T) {
	if _, err := New(0, nil, nil); err == nil {
		t.Fatal("a zero delay accepted")
	}
}

// Until this node has fenced the view, nothing starts, not even a target
// released by every peer or one that moved here. The first Admit after the
// fence decides each as it was first seen (the filter knows a key moved
// only in the pass that first sees it) and counts the delay from then; a
// target that waited before keeps its due.
func TestAdmitStartsNothingBeforeThisNodesFence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g, _ := newGate(t)
		p := &peers{}
		g.Admit(time.Now(), 7, []Candidate{{Key: 1, Known: true}}, p) // waits for the peers
		asked := p.asked["released"]
		time.Sleep(delay / 4)

		p.unfenced, p.released = true, true
		cands := []Candidate{{Key: 1, Known: true}, {Key: 2, Move: MovedHere}, {Key: 3, Known: true}}
		a := g.Admit(time.Now(), 8, cands, p)
		if a.Start[0] || a.Start[1] || a.Start[2] || a.Waiting != 3 {
			t.Fatalf("started before this node's fence: %+v", a)
		}
		if want := time.Now().Add(delay); !a.Next.Equal(want) {
			t.Fatalf("Next = %v, want a recheck after the delay at the latest (%v)", a.Next, want)
		}
		if p.asked["released"] != asked {
			t.Fatal("asked the peers before this node fenced")
		}

		// Fenced; the peers are not (a reload they have not applied). The
		// filter now sees key 2 as known, not moved.
		p.unfenced, p.released = false, false
		time.Sleep(delay / 4)
		cands[1] = Candidate{Key: 2, Known: true}
		a = g.Admit(time.Now(), 8, cands, p)
		if a.Start[0] || !a.Start[1] || a.Start[2] {
			t.Fatalf("after the fence: %+v, want only the target that moved here started", a)
		}
		// Key 1's due is half the delay away, key 3's the whole delay.
		if want := time.Now().Add(delay / 2); !a.Next.Equal(want) {
			t.Fatalf("Next = %v, want key 1's due %v", a.Next, want)
		}
		time.Sleep(delay / 2)
		if a := g.Admit(time.Now(), 8, cands, p); !a.Start[0] || a.Start[2] {
			t.Fatalf("at key 1's due: %+v, want key 1 started, key 3 waiting", a)
		}
	})
}
