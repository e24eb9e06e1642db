package sim

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestRingMovementIsConsistent(t *testing.T) {
	ts := Targets(5000, 100, 50, 0.02)
	for _, n := range []int{3, 10} {
		m := RingMovement(NodeNames(n), 512, ts)
		if m.Collateral != 0 {
			t.Errorf("%d nodes: %d targets moved between unchanged nodes", n, m.Collateral)
		}
		// About 1/(N+1) moves on join and 1/N on leave; allow the spread
		// that 512 tokens give.
		if math.Abs(m.JoinTargets-m.JoinIdeal) > 0.35*m.JoinIdeal {
			t.Errorf("%d nodes: %.3f moved on join, ideal %.3f", n, m.JoinTargets, m.JoinIdeal)
		}
		if math.Abs(m.LeaveTargets-m.LeaveIdeal) > 0.35*m.LeaveIdeal {
			t.Errorf("%d nodes: %.3f moved on leave, ideal %.3f", n, m.LeaveTargets, m.LeaveIdeal)
		}
		if m.HashModJoin < 0.5 {
			t.Errorf("%d nodes: hashmod moved only %.3f", n, m.HashModJoin)
		}
	}
}

func TestRingBalance(t *testing.T) {
	ts := Targets(20000, 100, 0, 0)
	b := RingBalance(NodeNames(10), 512, ts)
	if b.MaxMeanTargets < 1 || b.MaxMeanTargets > 1.3 || b.MinMeanTargets > 1 || b.MinMeanTargets < 0.7 {
		t.Fatalf("10 nodes, uniform: max/mean %.3f min/mean %.3f", b.MaxMeanTargets, b.MinMeanTargets)
	}
	if b.MaxMeanSamples != b.MaxMeanTargets {
		t.Fatalf("uniform targets: samples balance %.3f differs from targets balance %.3f", b.MaxMeanSamples, b.MaxMeanTargets)
	}
}

func TestTargetsShape(t *testing.T) {
	ts := Targets(1000, 100, 50, 0.02)
	keys := map[uint64]bool{}
	large := 0
	for _, x := range ts {
		keys[x.Key] = true
		if x.Samples == 5000 {
			large++
		}
	}
	if len(keys) != 1000 || large != 20 {
		t.Fatalf("%d distinct keys, %d large targets; want 1000 and 20", len(keys), large)
	}
	if r := RingReport([]int{3}, 64, 300); !strings.Contains(r, "| 3 |") {
		t.Fatalf("report lacks the 3-node row:\n%s", r)
	}
}

func TestGossipConvergence(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 5 memberlist nodes and waits for failure detection")
	}
	g, err := GossipConvergence(t.Context(), 5, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if g.Join <= 0 || g.Participants <= 0 || g.StateChange <= 0 || g.Leave <= 0 || g.Crash <= 0 {
		t.Fatalf("a timing is missing: %+v", g)
	}
}
