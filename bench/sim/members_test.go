package sim

import (
	"testing"
	"time"
)

// TestMembersAgreeAndCountGossip runs 12 in-process members over the
// in-memory network: they agree on the participants, see a leave and a
// crash (a stopped member is a dead host, not a sink that blocks its
// senders), and the counted gossip is positive.
func TestMembersAgreeAndCountGossip(t *testing.T) {
	m := SimulateMembers(t.Context(), 12, 2*time.Second, 2*time.Minute)
	if m.Err != "" {
		t.Fatal(m.Err)
	}
	if m.Join <= 0 || m.Leave <= 0 || m.Crash <= 0 {
		t.Errorf("timings not measured: %+v", m)
	}
	if m.BytesPerMember <= 0 {
		t.Errorf("no gossip counted: %+v", m)
	}
	if m.RingBuild <= 0 || m.RingBuildBytes == 0 {
		t.Errorf("ring build not measured: %+v", m)
	}
	t.Logf("\n%s", MembersReport([]Members{m}))
}

func TestWeightsStateGrowsWithTargets(t *testing.T) {
	a, b := WeightsStateBytes(100_000, 50), WeightsStateBytes(1_000_000, 50)
	if a < 1_200_000 || b < 12_000_000 || b-a != 900_000*12 {
		t.Errorf("weights state %d and %d bytes", a, b)
	}
}
