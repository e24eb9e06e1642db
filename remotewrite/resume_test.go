package remotewrite

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	tsdbreceiver "github.com/shoal-dev/shoal/internal/receiver"
)

// realReceiver serves a real Prometheus TSDB (out-of-order refused) through
// Prometheus' write handler. Request number hangAt (0-based) never gets an
// answer: with apply it is applied first (the answer is lost), without it
// never reaches storage.
type realReceiver struct {
	*tsdbreceiver.Receiver
	srv      *httptest.Server
	requests atomic.Int64
	hung     chan struct{} // closed once request hangAt arrived (and was applied)
}

func startRealReceiver(t *testing.T, hangAt int64, apply bool) *realReceiver {
	t.Helper()
	r, err := tsdbreceiver.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	rr := &realReceiver{Receiver: r, hung: make(chan struct{})}
	release := make(chan struct{})
	h := r.Handler()
	rr.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if n := rr.requests.Add(1) - 1; n == hangAt {
			if apply {
				h.ServeHTTP(httptest.NewRecorder(), req)
			}
			close(rr.hung)
			select {
			case <-release:
			case <-req.Context().Done():
			}
			http.Error(w, "too late", http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, req)
	}))
	t.Cleanup(func() {
		close(release)
		rr.srv.Close()
		r.Close()
	})
	return rr
}

// count returns how many samples of test_metric the TSDB holds.
func (rr *realReceiver) count(t *testing.T) int {
	t.Helper()
	got, err := rr.Samples(labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, "test_metric"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ss := range got {
		n += len(ss)
	}
	return n
}

// A queue stopped without settling a request (as by a crash: the answer
// never came) resumes exactly: requests acknowledged after the last progress
// write are not sent again, and the request in flight is sent alone, so that
// a receiver refusing it as already applied refuses nothing new. Before the
// acknowledgement journal, the restart re-read everything after the saved
// position in new groupings and a Prometheus receiver refused (and shoal
// dropped) requests mixing applied and never-sent samples.
func TestRestartNeverResendsAcknowledged(t *testing.T) {
	for _, applied := range []bool{false, true} {
		t.Run(fmt.Sprintf("in_flight_applied=%v", applied), func(t *testing.T) {
			old := persistInterval
			persistInterval = time.Hour // only the first round's position is saved
			t.Cleanup(func() { persistInterval = old })

			walDir, progDir := dirs(t)
			tw := newTestWAL(t, walDir)
			const rounds, hangAt = 6, 5
			rcv := startRealReceiver(t, hangAt, applied)
			cfg := loadConfig(t, oneQueue, rcv.srv.URL+"/api/v1/write")
			refs := tw.fleet(1, 40) // one round: 40 samples, one request
			base := time.Now().Add(-time.Minute).UnixMilli()
			// Round 0 is in the WAL before the queue opens, so that the one
			// progress write comes after it (not after the series records).
			tw.samples(refs, base)
			tm := startManager(t, walDir, progDir, cfg)
			for k := range rounds {
				if k > 0 {
					tw.samples(refs, base+int64(k)*1000)
				}
				tm.Notify()
				if k < hangAt {
					waitFor(t, fmt.Sprintf("round %d acknowledged", k), func() bool { return rcv.count(t) == (k+1)*len(refs) })
				}
			}
			<-rcv.hung
			tm.shutdown(t, 100*time.Millisecond) // the hung request is cancelled, never settled
			if pf := readProgressFile(t, progDir+"/q.json"); pf.Offset == 0 {
				t.Fatal("no position saved after the first round")
			}

			tm = startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL+"/api/v1/write"))
			// An applied request re-sent comes back accepted (one sample per
			// series, equal to the newest: an exact duplicate) or refused.
			resent := func() float64 {
				return max(0, tm.metric(t, "shoal_remotewrite_resent_samples_total", "outcome", resendDelivered)) +
					max(0, tm.metric(t, "shoal_remotewrite_resent_samples_total", "outcome", resendRefused))
			}
			waitFor(t, "every sample at the receiver, the in-flight request settled", func() bool {
				return rcv.count(t) == rounds*len(refs) && resent() == float64(len(refs))
			})
			tm.shutdown(t, 5*time.Second)

			if v := tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q"); v != 0 {
				t.Fatalf("samples_failed_total = %v after the restart, want 0", v)
			}
			// The one position saved is after round 0, or before it when the
			// queue read the series records alone first.
			if v := tm.metric(t, "shoal_remotewrite_resent_samples_total", "outcome", resendSkipped); v != float64((hangAt-1)*len(refs)) && v != float64(hangAt*len(refs)) {
				t.Fatalf("acknowledged samples skipped = %v, want %d or %d (rounds 1..%d, or 0..%[4]d)", v, (hangAt-1)*len(refs), hangAt*len(refs), hangAt-1)
			}
			st := rcv.Stats()
			if !applied && st.Rejected() != 0 {
				t.Fatalf("receiver refused %d samples: something acknowledged was sent again", st.Rejected())
			}
			t.Logf("receiver: %+v", st)
		})
	}
}

// A queue without a progress file (first start, a new
// remote_write, an unreadable file) writes its journal but never reads it
// back: openJournal only loads it when a saved position was found. A crash
// during the first round (which lasts the whole outage if the remote end is
// down at first start) re-sends it in new groupings; a request mixing the
// applied-but-unanswered request's samples with never-sent ones is refused
// as out of order by a Prometheus receiver, and the never-sent ones are lost.
func TestFirstRoundCrashWithoutProgressFileKeepsJournal(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	const hangAt = 1 // the first round's second request: applied, never answered
	rcv := startRealReceiver(t, hangAt, true)
	url := rcv.srv.URL + "/api/v1/write"
	refs := tw.fleet(1, 10)
	base := time.Now().Add(-time.Minute).UnixMilli()
	ts := func(k int) int64 { return base + int64(k)*1000 }
	// 80 samples: one round of two requests (50 acknowledged, 30 applied and
	// never answered).
	for k := range 8 {
		tw.samples(refs, ts(k))
	}
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, url))
	<-rcv.hung
	waitFor(t, "both requests applied", func() bool { return rcv.count(t) == 80 })
	tm.shutdown(t, 100*time.Millisecond) // as a crash: the round never ended
	if _, err := os.Stat(filepath.Join(progDir, "q.json")); err == nil {
		t.Fatal("a progress file was written: the first round ended")
	}

	for k := 8; k < 12; k++ {
		tw.samples(refs, ts(k))
	}
	tm = startManager(t, walDir, progDir, loadConfig(t, oneQueue, url))
	const want = 12 * 10
	failed := func() float64 {
		return tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q")
	}
	waitFor(t, "every sample at the receiver, or a request refused", func() bool {
		tm.Notify()
		return rcv.count(t) == want || failed() > 50 // the 50 acknowledged ones refused again
	})
	tm.shutdown(t, 5*time.Second)
	if got := rcv.count(t); got != want {
		t.Fatalf("receiver holds %d samples, want %d; %v samples dropped after the restart; receiver %+v",
			got, want, failed(), rcv.Stats())
	}
}
