package e2e

import (
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestHandoffReloadMovesKeys reloads every replica with a configuration
// that adds a URL parameter to the job: every target's key changes (and
// about two thirds move to another node) while its series stays. That is a
// hand-off like a ring change: no staleness markers, nothing refused, no
// value lost. The new owners start once every peer has fenced under the new
// configuration, at most --cluster.handoff-delay after their reload, and
// the changed URL shifts each target's scrape phase: the gap bound is the
// hand-off delay and two intervals.
func TestHandoffReloadMovesKeys(t *testing.T) {
	needBinary(t)
	h := newHandoffRun(t, 3)
	before, err := snapshotOwnership(h.nodes, h.targets)
	if err != nil {
		fatal(t, err)
	}
	path := h.nodes[0].spec.config
	cfg, err := os.ReadFile(path)
	if err != nil {
		fatal(t, err)
	}
	job := "  - job_name: \"e2e\"\n"
	if !strings.Contains(string(cfg), job) {
		fatalf(t, "configuration has no %q:\n%s", job, cfg)
	}
	changed := strings.Replace(string(cfg), job, job+"    params:\n      v: [\"2\"]\n", 1)
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		fatal(t, err)
	}
	h.phaseShiftFrom = time.Now()
	h.phaseShiftTo = h.phaseShiftFrom.Add(handoffDelay + 2*scrapeInterval)
	h.gapBound = handoffDelay + 2*scrapeInterval + 200*time.Millisecond
	for _, a := range h.nodes {
		resp, err := httpClient.Post(a.url("/-/reload"), "", nil)
		if err != nil {
			fatal(t, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fatalf(t, "%s: reload: %s", a.spec.name, resp.Status)
		}
	}
	after := waitConverged(t, h.nodes, h.targets)
	moved := 0
	for inst, n := range after {
		if before[inst] != n {
			moved++
		}
	}
	t.Logf("the reload moved %d of %d targets to another node", moved, len(h.targets))
	if moved == 0 {
		fatal(t, "no target changed node: the test proves nothing")
	}
	waitServed(t, h.targets, time.Now(), 3, convergeTimeout)
	h.finish(true)
}
