package sim

import (
	"strings"
	"testing"
)

// The chosen design meets issue 11's targets on a small, fast instance:
// skewed load on 10 nodes.
func TestBoundedLoadMeetsTargets(t *testing.T) {
	ts := Targets(3000, 100, 50, 0.02)
	c := DefaultPlacementConfig()
	r := SimulatePlacement(DesignBounded, 10, ts, c)
	t.Logf("%+v", r)
	if r.MaxMeanSamples > 1.15 {
		t.Errorf("max/mean samples %.3f, want <= 1.15", r.MaxMeanSamples)
	}
	if r.WorstNoisy > 1.15 {
		t.Errorf("worst max/mean samples under noise %.3f, want <= 1.15", r.WorstNoisy)
	}
	if r.JoinSettled > 1.5/10 || r.LeaveSettled > 1.5/10 {
		t.Errorf("join moved %.3f, leave %.3f of the samples, want <= 1.5/N", r.JoinSettled, r.LeaveSettled)
	}
	if r.ChurnPerHour > 0.05 {
		t.Errorf("churn %.3f of the samples per hour under noise, want <= 0.05", r.ChurnPerHour)
	}
	// Weights are published after MinSamples measurements, and then the
	// state stops changing.
	if limit := c.Weights.MinSamples + 2; r.ConvergeRounds > limit {
		t.Errorf("converged after %d rounds, want <= %d", r.ConvergeRounds, limit)
	}
	// Today's ring on the same load is what the design improves on.
	ring := SimulatePlacement(DesignRing, 10, ts, c)
	if ring.MaxMeanSamples <= r.MaxMeanSamples {
		t.Errorf("today's ring %.3f is not worse than bounded load %.3f: the comparison measures nothing", ring.MaxMeanSamples, r.MaxMeanSamples)
	}
}

// The ring rows of the placement table are the ring table's figures (with
// one joiner, the ring table's).
func TestPlacementRingMatchesRingTable(t *testing.T) {
	ts := Targets(2000, 100, 50, 0.02)
	names := NodeNames(10)
	b := RingBalance(names, 512, ts)
	c := DefaultPlacementConfig()
	c.Leavers = 1
	p := SimulatePlacement(DesignRing, 10, ts, c)
	if p.MaxMeanSamples != b.MaxMeanSamples || p.MaxMeanTargets != b.MaxMeanTargets {
		t.Fatalf("placement sim says %.3f/%.3f, ring table %.3f/%.3f", p.MaxMeanTargets, p.MaxMeanSamples, b.MaxMeanTargets, b.MaxMeanSamples)
	}
	m := RingMovement(names, 512, ts)
	if p.JoinNow != m.JoinSamples || p.ChurnPerHour != 0 || p.JoinSettled != p.JoinNow {
		t.Fatalf("ring join moves %.4f (table %.4f), churn %.4f", p.JoinNow, m.JoinSamples, p.ChurnPerHour)
	}
}

func TestPlacementDeterministic(t *testing.T) {
	ts := Targets(1500, 100, 50, 0.02)
	for _, d := range []string{DesignWeighted, DesignBounded} {
		a := SimulatePlacement(d, 5, ts, DefaultPlacementConfig())
		b := SimulatePlacement(d, 5, ts, DefaultPlacementConfig())
		if a != b {
			t.Errorf("%s: two runs differ:\n%+v\n%+v", d, a, b)
		}
	}
}

// Keys that every node sees never get orphaned or duplicated by a target
// that only some nodes see, except when each node places only its own
// discovered set (the cascade the gossiped set avoids); a join seen by
// half of the nodes orphans targets under hashmod, never under the ring.
func TestPlacementDisagreement(t *testing.T) {
	ts := Targets(3000, 100, 50, 0.02)
	c := DefaultPlacementConfig()
	for _, d := range []string{DesignRing, DesignWeighted, DesignBounded} {
		r := SimulateDisagreement(d, 10, ts, c)
		if r.TargetsCommonOrphans != 0 || r.TargetsCommonDups != 0 {
			t.Errorf("%s: a target seen by only some nodes orphaned %d and duplicated %d of the others", d, r.TargetsCommonOrphans, r.TargetsCommonDups)
		}
		if r.TargetsPartialOrphans == 0 {
			t.Errorf("%s: no partially seen target was orphaned: the scenario measures nothing", d)
		}
	}
	if r := SimulateDisagreement(DesignRing, 10, ts, c); r.JoinOrphans != 0 || r.JoinDups == 0 {
		t.Errorf("ring, join seen by half: %d orphaned, %d duplicated; want 0 and some", r.JoinOrphans, r.JoinDups)
	}
	if r := SimulateDisagreement(DesignHashmod, 10, ts, c); r.JoinOrphans == 0 {
		t.Error("hashmod, join seen by half: nothing orphaned")
	}
	if r := SimulateDisagreement(DesignBoundedLocal, 30, ts, c); r.TargetsCommonOrphans+r.TargetsCommonDups == 0 {
		t.Error("bounded load over local target sets: no cascade onto common targets")
	}
	// With the hand-off gate nothing is scraped twice while views differ;
	// the price is orphans, only among the targets the change moves.
	for _, d := range Designs {
		r := SimulateDisagreement(d, 10, ts, c)
		if r.WeightsGatedDups != 0 || r.JoinGatedDups != 0 {
			t.Errorf("%s with the gate: %d (state) and %d (join) scraped twice", d, r.WeightsGatedDups, r.JoinGatedDups)
		}
		if r.WeightsGatedOrphans > r.WeightsMoved {
			t.Errorf("%s with the gate: %d orphaned, but the state change moved only %d", d, r.WeightsGatedOrphans, r.WeightsMoved)
		}
		if d == DesignRing && r.JoinGatedOrphans == 0 {
			t.Errorf("ring with the gate, join seen by half: nothing orphaned (ungated: %d duplicated): the scenario measures nothing", r.JoinDups)
		}
	}
}

func TestPlacementReportSmoke(t *testing.T) {
	rep := PlacementReport([]int{3}, 300, DefaultPlacementConfig())
	for _, d := range append(Designs, DesignBoundedLocal) {
		if !strings.Contains(rep, "| "+d+" | 3 |") {
			t.Errorf("report lacks the %s row:\n%s", d, rep)
		}
	}
}

// Bounded load placed from the current owners meets the movement goals at
// 100 nodes (issue 24: a join or a leave moves at most 1.1/N of the samples
// with uniform targets and 1.5/N with skewed ones, max/mean at most 1.10),
// with weights measured and published by the owners; placed from scratch
// it does not with skewed targets (2.0/N and 2.3/N when this was written).
func TestBoundedMovementGoalsAtHundredNodes(t *testing.T) {
	for _, tc := range []struct {
		name        string
		skew, large float64
		goal        float64
	}{
		{"uniform", 0, 0, 1.1},
		{"skewed", 50, 0.02, 1.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts := Targets(10000, 100, tc.skew, tc.large)
			r := SimulatePlacement(DesignBounded, 100, ts, DefaultPlacementConfig())
			join, leave := 100*r.JoinSettled, 100*r.LeaveSettled
			t.Logf("join %.2f/N, leave %.2f/N, max/mean %.3f", join, leave, r.MaxMeanSamples)
			if join > tc.goal || leave > tc.goal || r.MaxMeanSamples > 1.10 {
				t.Errorf("join %.2f/N, leave %.2f/N (goal %.1f/N), max/mean %.3f (goal 1.10)", join, leave, tc.goal, r.MaxMeanSamples)
			}
			if tc.skew > 0 {
				s := SimulatePlacement(DesignBoundedScratch, 100, ts, DefaultPlacementConfig())
				if 100*s.JoinSettled <= tc.goal && 100*s.LeaveSettled <= tc.goal {
					t.Errorf("placed from scratch, a join moves %.2f/N and a leave %.2f/N: the comparison measures nothing", 100*s.JoinSettled, 100*s.LeaveSettled)
				}
			}
		})
	}
}
