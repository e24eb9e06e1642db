package e2e

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestKillLoop appends continuously and SIGKILLs the agent at random points,
// many times, with the receiver up: WAL segments of 64KiB (a new one every
// second or two), checkpoint and truncation every 2s and progress writes
// every second, so kills land during rotations, checkpoints, truncations,
// progress and journal writes as well as during sends. After the last
// restart the receiver must hold every counter value served, once (a TSDB
// stores a sample once): none missing except a scrape answered as the
// process died, and no refusal except of a request in flight at a kill,
// re-sent alone and refused as present (see checkRefusalsExplained).
// SHOAL_E2E_KILLS overrides the number of kills (default 25).
func TestKillLoop(t *testing.T) {
	needBinary(t)
	kills := 25
	if s := os.Getenv("SHOAL_E2E_KILLS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			fatalf(t, "SHOAL_E2E_KILLS=%q: want a positive integer", s)
		}
		kills = n
	}
	// ~2,000 samples/s: a 64KiB segment fills in a second or two.
	targets := startTargets(t, 5, 400)
	recv := startGatedReceiver(t)
	cfg := durabilityConfig(t, targetAddrs(targets), recv.writeURL(), "batch_send_deadline: 500ms", "max_shards: 4")
	a := newAgent(t, agentSpec{name: "killloop", config: cfg, extraArgs: []string{
		"--storage.wal.segment-size=64KiB",
		"--storage.wal.truncate-interval=2s",
	}})

	allowed := map[string]map[int]bool{}
	for _, tg := range targets {
		allowed[tg.addr] = map[int]bool{}
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 8))
	begin := time.Now()
	survived := 0
	for i := range kills {
		if time.Since(begin) > 3*time.Minute {
			t.Logf("stopping the loop after %d kills: time bound", i)
			break
		}
		a.start()
		a.waitReady(startTimeout)
		// Up for 0.5..4s: sometimes before the first send, sometimes mid-backlog.
		time.Sleep(time.Duration(500+rng.IntN(3500)) * time.Millisecond)
		a.kill()
		for addr, n := range servedNow(targets) {
			allowed[addr][n] = true // the scrape answered as the process died
		}
		survived++
	}
	a.start()
	a.waitReady(startTimeout)
	waitServed(t, targets, time.Now(), 5, startTimeout)
	checkCounters(t, recv.testReceiver, targets, servedNow(targets), allowed)
	checkRefusalsExplained(t, recv.testReceiver, a)
	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	if err := checkSeriesClean(ups); err != nil {
		fail(t, err)
	}
	logText, err := os.ReadFile(a.logPath)
	if err != nil {
		fatal(t, err)
	}
	truncations := strings.Count(string(logText), "WAL truncated")
	repairs := strings.Count(string(logText), "repairing")
	t.Logf("kills survived: %d in %v; WAL truncations (with checkpoints) logged: %d, torn tails repaired: %d",
		survived, time.Since(begin).Round(time.Second), truncations, repairs)
	if truncations == 0 {
		fail(t, "no WAL truncation happened during the loop: the kills never met one")
	}
}
