package sim

import (
	"encoding/json"
	"flag"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/shoal-dev/shoal/bench/harness"
)

// TestMembersAgreeAndCountGossip runs 12 in-process members over the
// in-memory network, in protocol time (a synctest bubble): they agree on
// the participants, see a metadata update, a leave and a crash (a stopped
// member is a dead host, not a sink that blocks its senders), and the
// counted gossip settles below what the joins cost.
func TestMembersAgreeAndCountGossip(t *testing.T) {
	m := simulateInBubble(t, 12, 10*time.Second, 5*time.Minute)
	if m.Err != "" {
		t.Fatal(m.Err)
	}
	if m.Join <= 0 || m.OneJoin <= 0 || m.Leave <= 0 || m.Crash <= 0 {
		t.Errorf("timings not measured: %+v", m)
	}
	// The update is pushed straight to every peer: it is seen well before
	// a gossip round (200ms) could carry it.
	if m.Update >= 200*time.Millisecond {
		t.Errorf("an update took %v to reach every member, want it pushed at once", m.Update)
	}
	if m.BytesPerMember <= 0 || m.JoinBytesPerMember < m.BytesPerMember {
		t.Errorf("gossip: settled %.0f B/s per member, %.0f B/s right after the joins", m.BytesPerMember, m.JoinBytesPerMember)
	}
	m.RingBuild, m.RingBuildBytes = RingBuild(12)
	if m.RingBuild <= 0 || m.RingBuildBytes == 0 {
		t.Errorf("ring build not measured: %+v", m)
	}
	t.Logf("\n%s", MembersReport([]Members{m}))
}

var (
	simMembers = flag.String("sim.members", "", "member counts for TestMembersAtScale, comma-separated (make scale sets it)")
	simOut     = flag.String("sim.out", "", "file TestMembersAtScale writes its results to, as JSON")
)

// TestMembersAtScale is the membership simulation of make scale: it runs
// at each of -sim.members in protocol time and writes the results to
// -sim.out. Without -sim.members it is skipped.
func TestMembersAtScale(t *testing.T) {
	if *simMembers == "" {
		t.Skip("set -sim.members (make scale runs it)")
	}
	// The members allocate fast: collecting at five times the live heap
	// instead of twice takes a third off the wall time at 300 members
	// (the collector had a fifth of the CPU). A thousand members keep
	// gigabytes live, so a soft limit of a quarter of the machine's memory
	// makes the collector work harder before the heap can grow past it.
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	if m := harness.ThisMachine().MemBytes; m > 0 {
		defer debug.SetMemoryLimit(debug.SetMemoryLimit(m / 4))
	}
	var ms []Members
	for _, f := range strings.Split(*simMembers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 3 {
			t.Fatalf("-sim.members: %q is not a member count of 3 or more", f)
		}
		start := time.Now()
		m := simulateInBubble(t, n, 30*time.Second, 30*time.Minute)
		m.RingBuild, m.RingBuildBytes = RingBuild(n)
		t.Logf("%d members in %v: %+v", n, time.Since(start).Round(time.Second), m)
		ms = append(ms, m)
	}
	b, err := json.Marshal(ms)
	if err != nil {
		t.Fatal(err)
	}
	if *simOut != "" {
		if err := os.WriteFile(*simOut, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("\n%s", MembersReport(ms))
}

// simulateInBubble runs SimulateMembers in a synctest bubble, then lets
// memberlist's goroutines finish on the bubble's clock (a shut-down
// member's probe may still wait for its timeout): the bubble ends only when
// every goroutine in it has.
func simulateInBubble(t *testing.T, n int, idle, timeout time.Duration) (m Members) {
	synctest.Test(t, func(t *testing.T) {
		m = SimulateMembers(t.Context(), n, idle, timeout, t.Logf)
		time.Sleep(2 * time.Minute)
	})
	return m
}
