package remotewrite

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"
)

// Review: a request refused as too large (413) is settled in the journal
// before its halves are sent. A crash while a half is in flight leaves the
// whole original request "done": the restart skips the half that never
// arrived.
func TestReviewSplitSettledBeforeHalvesSent(t *testing.T) {
	old := persistInterval
	persistInterval = time.Hour // only the first round's position is saved
	t.Cleanup(func() { persistInterval = old })

	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	var hang atomic.Bool
	release := make(chan struct{})
	var halves atomic.Int64
	rcv.respond = func(n int, req *prompb.WriteRequest, w http.ResponseWriter) int {
		if len(req.Timeseries) > 20 {
			return http.StatusRequestEntityTooLarge
		}
		if hang.Load() && halves.Add(1) == 2 {
			<-release // the second half of round 1 never gets an answer
			return http.StatusServiceUnavailable
		}
		return 0
	}
	cfg := loadConfig(t, oneQueue, rcv.srv.URL)
	refs := tw.fleet(1, 40) // one round: 40 samples, one request, split in two
	base := time.Now().Add(-time.Minute).UnixMilli()

	tm := startManager(t, walDir, progDir, cfg)
	tw.samples(refs, base)
	tm.Notify()
	waitFor(t, "round 0 delivered", func() bool { d, _ := rcv.count(); return d == len(refs) })
	hang.Store(true)
	tw.samples(refs, base+1000)
	tm.Notify()
	waitFor(t, "first half of round 1 delivered", func() bool { d, _ := rcv.count(); return d == len(refs)+20 })
	waitFor(t, "second half of round 1 at the receiver", func() bool { return halves.Load() >= 2 })
	tm.shutdown(t, 100*time.Millisecond) // as a crash: the second half never settled
	close(release)
	if pf := readProgressFile(t, progDir+"/q.json"); pf.Offset == 0 {
		t.Fatal("no position saved after round 0")
	}

	rcv.mtx.Lock()
	rcv.respond = nil
	rcv.mtx.Unlock()
	tm = startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	skipped := func() float64 {
		return tm.metric(t, "shoal_remotewrite_resent_samples_total", "outcome", resendSkipped)
	}
	waitFor(t, "round 1 complete, or skipped whole", func() bool {
		d, _ := rcv.count()
		return d == 2*len(refs) || skipped() == float64(len(refs))
	})
	tm.shutdown(t, 5*time.Second)
	if d, dups := rcv.count(); d != 2*len(refs) || dups != 0 {
		t.Fatalf("receiver has %d distinct samples (%d twice), want %d once; skipped as acknowledged: %v",
			d, dups, 2*len(refs), skipped())
	}
}
