package placement

import (
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-dev/shoal/cluster"
)

func voter(name string, cur, prev uint64, start int64) cluster.Peer {
	return cluster.Peer{Name: name, State: cluster.Participant, StartTime: time.Unix(start, 0), ScrapeConfig: cluster.ConfigIDs{Cur: cur, Prev: prev}}
}

// The agreement rule, the same on every node that sees the same gossip.
func TestAgreementOnScrapeConfiguration(t *testing.T) {
	const o, n, m = 10, 20, 30
	viewer := cluster.Peer{Name: "v", State: cluster.Viewer, ScrapeConfig: cluster.ConfigIDs{Cur: m}}
	older := cluster.Peer{Name: "old", State: cluster.Participant} // announces nothing
	for _, tc := range []struct {
		name     string
		peers    []cluster.Peer
		timedOut bool
		want     uint64
		rule     string
		aside    []string
	}{
		{"every participant runs one", []cluster.Peer{voter("a", o, 0, 1), voter("b", o, 0, 2), viewer, older}, false, o, ruleUnanimous, nil},
		{"one reloaded: the configuration all still hold", []cluster.Peer{voter("a", n, o, 1), voter("b", o, 0, 2), voter("c", o, 0, 3)}, false, o, ruleCommon, nil},
		{"all but one reloaded", []cluster.Peer{voter("a", n, o, 1), voter("b", n, o, 2), voter("c", o, 0, 3)}, false, o, ruleCommon, nil},
		{"every participant reloaded: the new one", []cluster.Peer{voter("a", n, o, 1), voter("b", n, o, 2), voter("c", n, o, 3)}, false, n, ruleUnanimous, nil},
		{"a second change mid-rollout keeps the old one", []cluster.Peer{voter("a", m, o, 1), voter("b", n, o, 2), voter("c", o, 0, 3)}, false, o, ruleCommon, nil},
		{"a replica kept on the old one past the timeout steps aside", []cluster.Peer{voter("a", n, o, 1), voter("b", n, o, 2), voter("c", o, 0, 3)}, true, n, ruleMajority, []string{"c"}},
		{"a restarted replica has nothing kept: the majority's", []cluster.Peer{voter("a", n, 0, 9), voter("b", o, 0, 2), voter("c", o, 0, 3)}, false, o, ruleMajority, []string{"a"}},
		{"most run the new one: the old ones step aside", []cluster.Peer{voter("a", n, 0, 9), voter("b", n, 0, 8), voter("c", o, 0, 3)}, false, n, ruleMajority, []string{"c"}},
		{"a tie goes to the longest-running participant's", []cluster.Peer{voter("a", n, 0, 9), voter("c", o, 0, 3)}, false, o, ruleMajority, []string{"a"}},
		{"one that forgot its kept configuration decided for all", []cluster.Peer{voter("a", n, 0, 1), voter("b", n, o, 2), voter("c", o, 0, 3)}, false, n, ruleMajority, []string{"c"}},
		{"a second change past the timeout: the one more still hold", []cluster.Peer{voter("a", m, n, 9), voter("b", n, 0, 8), voter("c", o, 0, 1)}, true, n, ruleMajority, []string{"c"}},
		{"no participant announces one", []cluster.Peer{viewer, older}, false, 0, ruleOwn, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := agree(tc.peers, tc.timedOut)
			if a.id != tc.want || a.rule != tc.rule || !slices.Equal(a.aside, tc.aside) {
				t.Fatalf("agree = %d by %s, aside %v; want %d by %s, aside %v", a.id, a.rule, a.aside, tc.want, tc.rule, tc.aside)
			}
			// Any order of the gossip gives the same answer.
			rev := slices.Clone(tc.peers)
			slices.Reverse(rev)
			if b := agree(rev, tc.timedOut); b.id != a.id || !slices.Equal(b.aside, a.aside) {
				t.Fatalf("reversed peers: %d aside %v", b.id, b.aside)
			}
		})
	}
}

// A node that loaded a change places targets by the configuration it kept
// while a peer runs the old one, and by the new one once every participant
// announces it: the filter is told which, the ring keeps every participant.
func TestCoordinatorPlacesByKeptConfigurationUntilEveryParticipantRunsTheNew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const oldCfg, newCfg = 0x1111_0000_0000_0001, 0x2222_0000_0000_0002
		h := start(t, Options{HandoffTimeout: time.Minute})
		h.cl.becomeReady()
		h.c.Configured(newCfg, oldCfg)
		h.cl.setPeer(voter("b", shortID(oldCfg), 0, 1))
		synctest.Wait()
		if got := h.filter.placing(); got != oldCfg {
			t.Fatalf("placing by %x, want the kept %x while b runs it", got, uint64(oldCfg))
		}
		if r, part, _ := h.filter.last(); !part || !slices.Equal(r.Nodes(), []string{"a", "b"}) {
			t.Fatalf("ring %v participant %v, want both on the ring", r.Nodes(), part)
		}
		if v := testutil.ToFloat64(h.c.metrics.driftPeers); v != 1 {
			t.Errorf("drift peers %v, want 1", v)
		}
		if s := h.cl.Self().ScrapeConfig; s != (cluster.ConfigIDs{Cur: shortID(newCfg), Prev: shortID(oldCfg)}) {
			t.Errorf("gossiped %+v", s)
		}

		h.cl.setPeer(voter("b", shortID(newCfg), shortID(oldCfg), 1))
		synctest.Wait()
		if got := h.filter.placing(); got != newCfg {
			t.Fatalf("placing by %x once b runs the new configuration too, want %x", got, uint64(newCfg))
		}
		if v := testutil.ToFloat64(h.c.metrics.driftPeers); v != 0 {
			t.Errorf("drift peers %v, want 0", v)
		}
		if s := h.c.ConfigStatus(); s.Rule != ruleUnanimous || s.SteppedAside {
			t.Errorf("status %+v", s)
		}
	})
}

// A peer kept on the old configuration holds the cluster on it for at most
// --cluster.handoff-timeout; then the configuration most participants run
// wins and that peer is left off the ring.
func TestReplicaKeptOnOldConfigurationStepsAsideAfterHandoffTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const oldCfg, newCfg = 0x1111_0000_0000_0001, 0x2222_0000_0000_0002
		h := start(t, Options{HandoffTimeout: time.Minute})
		h.cl.becomeReady()
		h.c.Configured(newCfg, oldCfg)
		h.cl.setPeer(voter("b", shortID(newCfg), shortID(oldCfg), 1))
		h.cl.setPeer(voter("c", shortID(oldCfg), 0, 1))
		synctest.Wait()
		if got := h.filter.placing(); got != oldCfg {
			t.Fatalf("placing by %x before the timeout, want the kept %x", got, uint64(oldCfg))
		}
		time.Sleep(59 * time.Second)
		synctest.Wait()
		if got := h.filter.placing(); got != oldCfg {
			t.Fatal("switched before --cluster.handoff-timeout")
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		if got := h.filter.placing(); got != newCfg {
			t.Fatalf("placing by %x after the timeout, want the majority's %x", got, uint64(newCfg))
		}
		if r, part, _ := h.filter.last(); !part || !slices.Equal(r.Nodes(), []string{"a", "b"}) {
			t.Fatalf("ring %v, want c (on the old configuration) off it", r.Nodes())
		}
		if d := h.c.ConfigStatus().Drift; !slices.Equal(d, []string{"c"}) {
			t.Errorf("drift %v, want [c]", d)
		}
	})
}

// This node, restarted on a configuration the majority does not run (it
// has nothing kept), steps aside: it owns nothing, says so, and comes back
// when its configuration is the cluster's.
func TestNodeOnAnotherConfigurationStepsAside(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const oldCfg, newCfg = 0x1111_0000_0000_0001, 0x2222_0000_0000_0002
		h := start(t, Options{HandoffTimeout: time.Minute})
		h.cl.becomeReady()
		h.c.Configured(newCfg, 0)
		h.cl.setPeer(voter("b", shortID(oldCfg), 0, 1))
		h.cl.setPeer(voter("c", shortID(oldCfg), 0, 1))
		synctest.Wait()
		if r, part, _ := h.filter.last(); part || !slices.Equal(r.Nodes(), []string{"b", "c"}) {
			t.Fatalf("ring %v participant %v, want a off the ring and owning nothing", r.Nodes(), part)
		}
		if v := testutil.ToFloat64(h.c.metrics.steppedAside); v != 1 {
			t.Errorf("stepped aside %v, want 1", v)
		}
		if !h.c.ConfigStatus().SteppedAside {
			t.Error("status does not say the node steps aside")
		}
		h.cl.setPeer(voter("b", shortID(newCfg), 0, 1))
		synctest.Wait()
		if r, part, _ := h.filter.last(); !part || !slices.Equal(r.Nodes(), []string{"a", "b"}) {
			t.Fatalf("ring %v participant %v once most run a's configuration, want a and b", r.Nodes(), part)
		}
		if v := testutil.ToFloat64(h.c.metrics.steppedAside); v != 0 {
			t.Errorf("stepped aside %v, want 0", v)
		}
	})
}

func (f *fakeFilter) placing() uint64 {
	v, _ := f.c.View()
	return v.PlaceBy
}
