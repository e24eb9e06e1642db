package remotewrite

import (
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/prometheus/prompb"
)

// TestFailurePolicyByStatus runs every status of README's table against a
// real HTTP server: the first request is answered with the status (twice for
// retried ones), later ones are accepted. Retried statuses deliver every
// sample exactly once with nothing failed; dropped ones lose exactly the
// refused request, counted by reason, and the queue moves on past it.
func TestFailurePolicyByStatus(t *testing.T) {
	type want struct {
		drop       string // reason; "" means retried until accepted
		retryAfter bool
	}
	cases := []struct {
		status     int
		retryAfter string
		want       want
	}{
		{status: 400, want: want{drop: dropBadRequest}},
		{status: 401},
		{status: 403},
		{status: 404},
		{status: 408},
		{status: 409, want: want{drop: dropConflict}},
		{status: 422, want: want{drop: dropUnprocessable}},
		{status: 429},
		{status: 429, retryAfter: "1", want: want{retryAfter: true}},
		{status: 500},
		{status: 503},
		{status: 503, retryAfter: "1", want: want{retryAfter: true}},
	}
	for _, tc := range cases {
		name := strconv.Itoa(tc.status)
		if tc.retryAfter != "" {
			name += "_retry_after"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			walDir, progDir := dirs(t)
			tw := newTestWAL(t, walDir)
			rcv := newReceiver(t)
			refusals := 1
			if tc.want.drop == "" {
				refusals = 2
			}
			rcv.respond = func(n int, _ *prompb.WriteRequest, w http.ResponseWriter) int {
				if n < refusals {
					if tc.retryAfter != "" {
						w.Header().Set("Retry-After", tc.retryAfter)
					}
					return tc.status
				}
				return 0
			}
			refs := tw.fleet(1, 1)
			first := writeRounds(tw, refs, 1000, 10) // one request of 10 samples
			tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))

			if tc.want.drop != "" {
				waitFor(t, "refused batch dropped", func() bool {
					return tm.metric(t, "shoal_remotewrite_samples_dropped_total", "remote_name", "q", "reason", tc.want.drop) == 10
				})
				// The dropped batch is settled: progress moves past it.
				size := segSize(t, walDir, 0)
				waitFor(t, "progress past the dropped batch", func() bool {
					pf, ok, _ := readProgress(filepath.Join(progDir, "q.json"))
					return ok && pf.position() == position{Segment: 0, Offset: size}
				})
				later := writeRounds(tw, refs, 100000, 5)
				tm.Notify()
				waitFor(t, "later samples", func() bool { d, _ := rcv.count(); return d >= 5 })
				tm.shutdown(t, 5*time.Second)
				checkAll(t, rcv, refs, later)
				if v := tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q"); v != 10 {
					t.Fatalf("samples_failed_total = %v, want 10", v)
				}
				if v := tm.metric(t, "shoal_remotewrite_retries_total", "remote_name", "q"); v > 0 {
					t.Fatalf("a dropped status was retried %v times", v)
				}
				return
			}

			waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 10 })
			tm.shutdown(t, 5*time.Second)
			checkAll(t, rcv, refs, first)
			if v := tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q"); v != 0 {
				t.Fatalf("samples_failed_total = %v, want 0", v)
			}
			if v := tm.metric(t, "shoal_remotewrite_samples_dropped_total", "remote_name", "q"); v > 0 {
				t.Fatalf("shoal_remotewrite_samples_dropped_total = %v, want none", v)
			}
			if v := tm.metric(t, "shoal_remotewrite_retries_total", "remote_name", "q", "reason", strconv.Itoa(tc.status)); v != 2 {
				t.Fatalf("shoal_remotewrite_retries_total{reason=%q} = %v, want 2", strconv.Itoa(tc.status), v)
			}
			if v := tm.metric(t, "prometheus_remote_storage_samples_retried_total", "remote_name", "q"); v != 20 {
				t.Fatalf("samples_retried_total = %v, want 20", v)
			}
			rcv.mtx.Lock()
			gap := rcv.attempts[2].Sub(rcv.attempts[1])
			rcv.mtx.Unlock()
			// max_backoff is 40ms: only Retry-After explains a wait of a second.
			if tc.want.retryAfter && gap < 900*time.Millisecond {
				t.Fatalf("retried after %v, Retry-After asked for 1s", gap)
			}
			if !tc.want.retryAfter && gap > 500*time.Millisecond {
				t.Fatalf("retried after %v with max_backoff 40ms", gap)
			}
		})
	}
}

// TestTooLargeIsSplit: a 413 is not the data's fault while the request holds
// more than one item: it is halved until the receiver takes it. A single
// item the receiver still finds too large is dropped as too_large.
func TestTooLargeIsSplit(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	rcv.respond = func(_ int, req *prompb.WriteRequest, _ http.ResponseWriter) int {
		n := 0
		for _, ts := range req.Timeseries {
			n += len(ts.Samples)
			for _, l := range ts.Labels {
				if l.Name == "i" && l.Value == "9" {
					return http.StatusRequestEntityTooLarge // never fits
				}
			}
		}
		if n > 3 {
			return http.StatusRequestEntityTooLarge
		}
		return 0
	}
	refs := tw.fleet(1, 9) // series 1..9; series 9 is always too large
	tss := writeRounds(tw, refs, 1000, 2)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	waitFor(t, "the oversized sample dropped", func() bool {
		return tm.metric(t, "shoal_remotewrite_samples_dropped_total", "remote_name", "q", "reason", dropTooLarge) == 2
	})
	waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 16 })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs[:8], tss)
	if v := tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q"); v != 2 {
		t.Fatalf("samples_failed_total = %v, want 2 (series 9's samples only)", v)
	}
}

// TestNetworkErrorsAreRetried: a receiver that closes connections without
// answering is retried (reason network) and nothing is lost.
func TestNetworkErrorsAreRetried(t *testing.T) {
	walDir, progDir := dirs(t)
	tw := newTestWAL(t, walDir)
	rcv := newReceiver(t)
	rcv.respond = func(n int, _ *prompb.WriteRequest, w http.ResponseWriter) int {
		if n < 2 {
			hj, ok := w.(http.Hijacker)
			if !ok {
				panic("no hijacker")
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close()
			}
			panic(http.ErrAbortHandler)
		}
		return 0
	}
	refs := tw.fleet(1, 2)
	tss := writeRounds(tw, refs, 1000, 3)
	tm := startManager(t, walDir, progDir, loadConfig(t, oneQueue, rcv.srv.URL))
	waitFor(t, "delivery", func() bool { d, _ := rcv.count(); return d >= 6 })
	tm.shutdown(t, 5*time.Second)
	checkAll(t, rcv, refs, tss)
	if v := tm.metric(t, "shoal_remotewrite_retries_total", "remote_name", "q", "reason", "network"); v < 1 {
		t.Fatalf("retries_total{reason=network} = %v, want >= 1", v)
	}
	if v := tm.metric(t, "prometheus_remote_storage_samples_failed_total", "remote_name", "q"); v != 0 {
		t.Fatal(fmt.Sprint("samples_failed_total = ", v))
	}
}
