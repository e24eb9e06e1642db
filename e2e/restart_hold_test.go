package e2e

import (
	"fmt"
	"testing"
	"time"
)

// A replica SIGKILLed while its remote-write queues hold back the samples
// of targets it has just gained (the remote end is down, so the old owners'
// last samples of them are not delivered yet) and started again on the same
// storage keeps those holds. Its peers, which take its targets back while
// it is a viewer again, wait for its samples of the life before. Once the
// remote end is back, the receiver refuses nothing and misses nothing.
// With holds in memory alone, the restarted replica sent its held samples
// at once, ahead of the old owners' older ones.
func TestKilledReplicaKeepsItsHoldsAcrossTheRestart(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 24, 1)
	recv := startGatedReceiver(t)
	// Small requests: the old owners' backlogs go out in many, so that
	// samples sent out of turn would land among them.
	cfg := durabilityConfig(t, targetAddrs(targets), recv.writeURL(), "min_backoff: 50ms", "max_backoff: 1s", "max_samples_per_send: 20")
	nodes := newClusterAgents(t, 4, cfg, 3)
	first, joiner := nodes[:3], nodes[3]
	for _, a := range nodes {
		// Ring placement whatever the default: the bounded placement moves
		// targets on its own publications, which this test does not need.
		a.spec.extraArgs = append(a.spec.extraArgs, "--cluster.placement=ring")
	}
	keepLogs(t, nodes)
	startCluster(t, first)
	waitConverged(t, first, targets)
	waitServed(t, targets, time.Now(), 2, convergeTimeout)

	recv.status.Store(503)
	t.Log("remote end down")
	waitServed(t, targets, time.Now(), 5, convergeTimeout) // a backlog at every old owner

	joiner.spec.waitForSize = 4
	joiner.start()
	joiner.waitReady(startTimeout)
	owners := waitConverged(t, nodes, targets)
	gained := 0
	for _, o := range owners {
		if o == joiner.spec.name {
			gained++
		}
	}
	if gained == 0 {
		fatalf(t, "%s gained no target of %d", joiner.spec.name, len(targets))
	}
	eventually(t, convergeTimeout, joiner.spec.name+" holds back its samples of the gained targets", func() error {
		v, err := joiner.metricValue("shoal_handoff_holds", nil)
		if err != nil {
			return err
		}
		if v < 1 {
			return fmt.Errorf("shoal_handoff_holds = %v", v)
		}
		return nil
	})
	waitServed(t, targets, time.Now(), 3, convergeTimeout) // held samples in the joiner's WAL

	joiner.kill()
	t.Logf("%s (%d targets gained) SIGKILLed while holding; starting it again", joiner.spec.name, gained)
	joiner.start()
	joiner.waitReady(startTimeout)
	if line := logLine(t, joiner, "Took up the hand-off state"); line == "" || logField(line, "holds") == "0" {
		errorf(t, "%s did not take up its holds after the restart: %q", joiner.spec.name, line)
	}
	waitConverged(t, nodes, targets)
	waitServed(t, targets, time.Now(), 2, convergeTimeout)

	recv.status.Store(0)
	t.Log("remote end back")
	want := servedNow(targets)
	checkCounters(t, recv.testReceiver, targets, want, nil)
	st := recv.Stats()
	t.Logf("receiver: stored=%d out_of_order=%d duplicate=%d too_old=%d exact_duplicates=%d",
		st.Stored, st.OutOfOrder, st.Duplicate, st.TooOld, st.Dropped)
	recv.checkNoRejections(t)
	checkNoFailedSamples(t, nodes)
}
