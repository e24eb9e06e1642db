package e2e

import (
	"net/http"
	"testing"
	"time"
)

// TestKillRightAfterAcknowledgement SIGKILLs a single replica 50ms after the
// receiver (up, a real TSDB refusing out-of-order samples) acknowledged a
// write, at a 1s scrape interval and with Prometheus' default queue_config.
// A short outage first builds a backlog, so that when the receiver is back
// rounds of several samples per series follow each other faster than the
// progress file's once-a-second writes. After the restart no value may be
// missing and nothing acknowledged sent again: the acknowledgement journal
// keeps the restarted queue from re-sending acknowledged samples (which a
// Prometheus receiver refuses as out of order, with the never-sent samples
// of the same request). The only refusal allowed is of a request that was
// in flight at the kill (applied, its answer lost): it is re-sent alone and
// refused as present, which loses nothing. On the code before the journal
// this test fails with out-of-order refusals of acknowledged data.
func TestKillRightAfterAcknowledgement(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 5, 400)
	recv := startGatedReceiver(t)
	recv.status.Store(http.StatusServiceUnavailable)
	cfg := durabilityConfig(t, targetAddrs(targets), recv.writeURL())
	a := newAgent(t, agentSpec{name: "killed", config: cfg})
	a.start()
	a.waitReady(startTimeout)
	waitServed(t, targets, time.Time{}, 15, startTimeout)

	// Receiver up: kill shortly after the 7th acknowledgement (the second
	// round of the backlog, whose first round is the last progress write).
	for len(recv.acks) > 0 {
		<-recv.acks
	}
	recv.status.Store(0)
	deadline := time.After(convergeTimeout)
	for n := 0; n < 7; n++ {
		select {
		case <-recv.acks:
		case <-deadline:
			fatalf(t, "only %d acknowledgements", n)
		}
	}
	time.Sleep(50 * time.Millisecond) // the kill point: shortly after the acknowledgement
	a.kill()
	atKill := servedNow(targets)
	allowed := map[string]map[int]bool{}
	for addr, n := range atKill {
		allowed[addr] = map[int]bool{n: true} // the scrape answered as the process died
	}

	a.start()
	a.waitReady(startTimeout)
	waitServed(t, targets, time.Now(), 4, startTimeout)
	checkCounters(t, recv.testReceiver, targets, servedNow(targets), allowed)
	checkRefusalsExplained(t, recv.testReceiver, a)
}

// TestOutageThenAuthWindow: a 10s outage (503) followed by windows of 403,
// 401 and 404 (an auth proxy or ingress restarting) loses nothing: 503 is
// retried with backoff, the others pause the queue (the durable failure
// policy) until the next probe, here every second, and the backlog arrives
// once the receiver accepts again, with nothing failed or dropped.
func TestOutageThenAuthWindow(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 3, 20)
	recv := startGatedReceiver(t)
	recv.status.Store(http.StatusServiceUnavailable)
	cfg := durabilityConfig(t, targetAddrs(targets), recv.writeURL())
	appendToFile(t, cfg, "    shoal: {probe_interval: 1s}\n") // the entry ends the file
	a := newAgent(t, agentSpec{name: "outage", config: cfg})
	a.start()
	a.waitReady(startTimeout)

	waitServed(t, targets, time.Time{}, 10, startTimeout)
	for _, w := range []struct {
		code int
		n    int
	}{{http.StatusForbidden, 3}, {http.StatusUnauthorized, 2}, {http.StatusNotFound, 2}} {
		gated := recv.gated.Load()
		recv.status.Store(int64(w.code))
		waitServed(t, targets, time.Now(), w.n, startTimeout)
		eventually(t, startTimeout, "a write refused in the window", func() error {
			if recv.gated.Load() == gated {
				return errNotYet
			}
			return nil
		})
	}
	recv.status.Store(0)
	waitServed(t, targets, time.Now(), 3, startTimeout)
	checkCounters(t, recv.testReceiver, targets, servedNow(targets), nil)
	recv.checkNoRejections(t)

	for name, want := range map[string]map[string]string{
		"prometheus_remote_storage_samples_failed_total": nil,
		"shoal_remotewrite_samples_dropped_total":        nil,
	} {
		if v, err := a.metricValue(name, want); err == nil && v != 0 {
			errorf(t, "%s = %v, want 0", name, v)
		}
	}
	for _, code := range []string{"503", "403", "401", "404"} {
		v, err := a.metricValue("shoal_remotewrite_retries_total", map[string]string{"reason": code})
		if err != nil || v < 1 {
			errorf(t, "shoal_remotewrite_retries_total{reason=%q} = %v (%v), want >= 1", code, v, err)
		}
	}
}
