package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/shoal-dev/shoal/internal/testutil"
)

// TestDiskFullWhileRunning runs the agent with --storage.path on a small
// tmpfs and a receiver that is down, so that the WAL holds a backlog, then
// fills the disk: the agent logs the failure, shows it in shoal_wal_writable
// and the refusal counters, and keeps serving; once space
// returns it writes again, and after the receiver comes back every value
// scraped before the disk filled and after it was freed arrives, with no
// refusal at the receiver. A restart then replays the WAL without repair.
func TestDiskFullWhileRunning(t *testing.T) {
	needBinary(t)
	recv := startGatedReceiver(t)
	recv.status.Store(503)
	targets := startTargets(t, 3, 20)
	cfg := durabilityConfig(t, targetAddrs(targets), recv.writeURL())
	a := newAgent(t, agentSpec{name: "diskfull", config: cfg, extraArgs: []string{"--storage.wal.segment-size=64KB"}})
	testutil.MountTmpfs(t, a.storage, "4m")
	t.Cleanup(a.killIfRunning) // before the unmount (cleanups run last-in first-out)
	a.start()
	a.waitReady(startTimeout)

	metric := func(name string, lbls map[string]string, want func(float64) bool) func() error {
		return func() error {
			if err := a.exitedEarly(); err != nil {
				fatal(t, err)
			}
			v, err := a.metricValue(name, lbls)
			if err != nil {
				return err
			}
			if !want(v) {
				return fmt.Errorf("%s%v = %v", name, lbls, v)
			}
			return nil
		}
	}
	servedAtLeast := func(min map[string]int, n int) func() error {
		return func() error {
			for _, tg := range targets {
				if tg.count() < min[tg.addr]+n {
					return fmt.Errorf("%s served %d", tg.addr, tg.count())
				}
			}
			return nil
		}
	}
	eventually(t, startTimeout, "a backlog of scrapes in the WAL", servedAtLeast(map[string]int{}, 5))
	before := servedNow(targets)

	free := testutil.FillDisk(t, a.storage)
	eventually(t, startTimeout, "the agent noticing the full disk", metric("shoal_wal_writable", nil, func(v float64) bool { return v == 0 }))
	// A few intervals on a full disk: refused and counted, still serving.
	full := servedNow(targets)
	eventually(t, startTimeout, "scrapes go on while the disk is full", servedAtLeast(full, 3))
	eventually(t, startTimeout, "refused samples counted", metric("shoal_wal_rejected_samples_total", map[string]string{"reason": "unwritable"}, func(v float64) bool { return v > 0 }))

	free()
	eventually(t, startTimeout, "the WAL writable again", metric("shoal_wal_writable", nil, func(v float64) bool { return v == 1 }))
	after := servedNow(targets)
	if v, err := a.metricValue("shoal_wal_write_recoveries_total", nil); err != nil || v < 1 {
		errorf(t, "shoal_wal_write_recoveries_total = %v (%v), want at least 1", v, err)
	}
	if v, err := a.metricValue("shoal_wal_write_failures_total", nil); err != nil || v < 1 {
		errorf(t, "shoal_wal_write_failures_total = %v (%v), want at least 1", v, err)
	}
	recv.status.Store(0)
	eventually(t, startTimeout, "scrapes after the recovery", servedAtLeast(after, 5))
	final := servedNow(targets)

	// Values served between the last one before the fill (which may have
	// been in flight) and the first after the recovery may be missing; no
	// other may.
	allowed := map[string]map[int]bool{}
	for _, tg := range targets {
		allowed[tg.addr] = map[int]bool{}
		for v := before[tg.addr]; v <= after[tg.addr]+1; v++ {
			allowed[tg.addr][v] = true
		}
	}
	checkCounters(t, recv.testReceiver, targets, final, allowed)
	recv.checkNoRejections(t)

	log, err := os.ReadFile(a.logPath)
	if err != nil {
		fatal(t, err)
	}
	for _, want := range []string{"Writing to the WAL failed", "no space left on device", "The WAL is writable again"} {
		if !strings.Contains(string(log), want) {
			errorf(t, "the log lacks %q", want)
		}
	}

	// A restart replays what was written around the outage without repair.
	a.stop()
	a.start()
	a.waitReady(startTimeout)
	if v, err := a.metricValue("shoal_wal_corruptions_repaired_total", nil); err != nil || v != 0 {
		errorf(t, "replay after the outage repaired %v corruptions (%v), want 0", v, err)
	}
	a.stop()
}
