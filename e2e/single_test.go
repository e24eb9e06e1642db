package e2e

import (
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// loadSeries is how many extra gauge series each target of
// TestSingleReplica serves, so that the throughput figure means something.
// SHOAL_E2E_LOAD_SERIES overrides it.
func loadSeries(t testing.TB) int {
	if s := os.Getenv("SHOAL_E2E_LOAD_SERIES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			fatalf(t, "SHOAL_E2E_LOAD_SERIES=%q: want a non-negative integer", s)
		}
		return n
	}
	return 2000
}

// TestSingleReplica runs one agent with clustering disabled against five
// targets and checks that everything they served arrives at the receiver,
// with the external labels, and that SIGTERM flushes and exits 0.
func TestSingleReplica(t *testing.T) {
	needBinary(t)
	load := loadSeries(t)
	targets := startTargets(t, 5, load)
	recv := startReceiver(t)
	extLabels := map[string]string{"cluster": "e2e", "region": "test-1"}
	cfg := writeConfig(t, t.TempDir(), configOpts{
		targets:        targetAddrs(targets),
		remoteWriteURL: recv.writeURL(),
		externalLabels: extLabels,
	})
	a := newAgent(t, agentSpec{name: "single", config: cfg})
	a.start()
	a.waitReady(startTimeout)

	// The targets API lists all five, scraped successfully.
	eventually(t, startTimeout, "all targets active and up", func() error {
		active, err := a.activeTargets()
		if err != nil {
			return err
		}
		for _, tg := range targets {
			at, ok := active[tg.addr]
			if !ok {
				return fmt.Errorf("%s not in activeTargets", tg.addr)
			}
			if at.Health != "up" || at.LastScrape.IsZero() {
				return fmt.Errorf("%s: health %q, lastScrape %v, lastError %q", tg.addr, at.Health, at.LastScrape, at.LastError)
			}
			if want := "http://" + tg.addr + "/metrics"; at.ScrapeURL != want {
				return fmt.Errorf("%s: scrapeUrl %q, want %q", tg.addr, at.ScrapeURL, want)
			}
		}
		if len(active) != len(targets) {
			return fmt.Errorf("%d active targets, want %d", len(active), len(targets))
		}
		return nil
	})

	// Throughput: samples sent over a window of ten scrapes per target, once
	// warmed up. Each scrape yields the counter, the load series and five
	// report series (up, scrape_duration_seconds, ...).
	waitServed(t, targets, time.Time{}, 3, startTimeout)
	t0 := time.Now()
	sent0, err := a.metricValue("prometheus_remote_storage_samples_total", nil)
	if err != nil {
		errorf(t, "remote-write metric: %v", err)
	}
	acc0 := recv.Stats().Accepted
	waitServed(t, targets, t0, 10, startTimeout)
	t1 := time.Now()
	sent1, err := a.metricValue("prometheus_remote_storage_samples_total", nil)
	if err != nil {
		errorf(t, "remote-write metric: %v", err)
	}
	acc1 := recv.Stats().Accepted
	secs := t1.Sub(t0).Seconds()
	offered := float64(len(targets)*(load+1+5)) / scrapeInterval.Seconds()
	t.Logf("throughput, one replica, %d targets × %d series: sent %.0f samples/s (prometheus_remote_storage_samples_total), receiver accepted %.0f samples/s, offered %.0f samples/s",
		len(targets), load+1, (sent1-sent0)/secs, float64(acc1-acc0)/secs, offered)

	// Every scrape served before t1 arrives: the counter values 1..count
	// without holes. A scrape that failed would show as up=0 and is
	// checked below.
	checkServedArrived(t, recv, targets)

	// up is 1 for every target, in every sample.
	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	if err := checkSeriesClean(ups); err != nil {
		fail(t, err)
	}
	upBy := byInstance(ups)
	for _, tg := range targets {
		group := upBy[tg.addr]
		if len(group) != 1 {
			errorf(t, "%s: %d up series, want 1: %s", tg.addr, len(group), seriesLabels(group))
			continue
		}
		for _, s := range group[0].samples {
			if s.V != 1 {
				errorf(t, "%s: up=%v at %s", tg.addr, s.V, msTime(s.T))
			}
		}
	}

	// The external labels are on every series.
	all, err := recv.Series()
	if err != nil {
		fatal(t, err)
	}
	if len(all) < len(targets)*(load+1) {
		errorf(t, "receiver holds %d series, want at least %d", len(all), len(targets)*(load+1))
	}
	bad := 0
	for _, ls := range all {
		for k, v := range extLabels {
			if ls.Get(k) != v {
				if bad < 5 {
					errorf(t, "series %s lacks external label %s=%q", ls, k, v)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		errorf(t, "%d series lack external labels", bad)
	}
	recv.checkNoRejections(t)

	rss, err := peakRSS(a.pid())
	if err != nil {
		errorf(t, "peak RSS: %v", err)
	}
	t.Logf("peak RSS (VmHWM) of the replica: %.1f MiB", float64(rss)/(1<<20))

	// SIGTERM: flush and exit 0. Everything served before the signal,
	// except possibly the one scrape in flight, arrives.
	before := map[string]int{}
	for _, tg := range targets {
		before[tg.addr] = tg.count()
	}
	a.stop()
	vals, err := recv.counterValues()
	if err != nil {
		fatal(t, err)
	}
	for _, tg := range targets {
		if got := maxValue(vals[tg.addr]); got < before[tg.addr]-1 {
			errorf(t, "%s: after SIGTERM the receiver has counter up to %d; %d were served before the signal", tg.addr, got, before[tg.addr])
		}
		missing, err := missingValues(vals[tg.addr], maxValue(vals[tg.addr]))
		if err != nil || len(missing) > 0 {
			errorf(t, "%s: after SIGTERM: missing %v, %v", tg.addr, missing, err)
		}
	}
	recv.checkNoRejections(t)
}

// TestRestartDurability kills an agent with SIGKILL while the receiver is
// down, restarts it on the same storage path and checks that every sample
// appended before the kill still reaches the receiver. With the receiver
// down no position is ever saved, so this test cannot see a restart that
// re-sends acknowledged data: TestKillRightAfterAcknowledgement and
// TestKillLoop (durability_*_test.go) kill with the receiver up.
func TestRestartDurability(t *testing.T) {
	needBinary(t)
	targets := startTargets(t, 3, 50)
	recv := startReceiver(t)
	recv.unavailable.Store(true)
	cfg := writeConfig(t, t.TempDir(), configOpts{
		targets:        targetAddrs(targets),
		remoteWriteURL: recv.writeURL(),
		externalLabels: map[string]string{"cluster": "e2e"},
	})
	a := newAgent(t, agentSpec{name: "durable", config: cfg})
	a.start()
	a.waitReady(startTimeout)

	// Scrape a while with the receiver refusing: samples pile up in the WAL.
	waitServed(t, targets, time.Time{}, 6, startTimeout)
	eventually(t, startTimeout, "agent tried to send and was refused", func() error {
		if n := recv.refused.Load(); n < 2 {
			return fmt.Errorf("%d writes refused", n)
		}
		return nil
	})
	a.kill()
	atKill := map[string]int{}
	for _, tg := range targets {
		atKill[tg.addr] = tg.count()
	}
	t.Logf("SIGKILL after %v scrapes per target (receiver refused %d writes)", atKill, recv.refused.Load())
	if got, err := recv.seriesOf(counterMetric); err != nil || len(got) != 0 {
		fatalf(t, "receiver holds %d counter series while unavailable (err %v)", len(got), err)
	}

	// Restart on the same storage while the receiver is still down, scrape
	// some more, then bring the receiver back.
	a.start()
	a.waitReady(startTimeout)
	restarted := time.Now()
	waitServed(t, targets, restarted, 3, startTimeout)
	recv.unavailable.Store(false)
	want := map[string]int{}
	for _, tg := range targets {
		want[tg.addr] = tg.count()
	}
	eventually(t, convergeTimeout, "receiver has every counter value served", func() error {
		vals, err := recv.counterValues()
		if err != nil {
			return err
		}
		for _, tg := range targets {
			if got := maxValue(vals[tg.addr]); got < want[tg.addr] {
				return fmt.Errorf("%s: receiver has counter up to %d, target served %d", tg.addr, got, want[tg.addr])
			}
		}
		return nil
	})

	// No gap: the values are contiguous across the restart. The only value
	// allowed to be missing is the last one served before the kill: that
	// scrape may have been answered but not yet appended when the process
	// died. Every earlier scrape was appended, since the next one was served
	// (a scrape loop appends and commits before scraping again).
	vals, err := recv.counterValues()
	if err != nil {
		fatal(t, err)
	}
	for _, tg := range targets {
		missing, err := missingValues(vals[tg.addr], want[tg.addr])
		if err != nil {
			errorf(t, "%s: %v", tg.addr, err)
		}
		for _, m := range missing {
			if m != atKill[tg.addr] {
				errorf(t, "%s: counter value %d lost (served before the kill at %d, restart served up to %d); missing: %v",
					tg.addr, m, atKill[tg.addr], want[tg.addr], missing)
				break
			}
		}
		t.Logf("%s: %d counter values at the receiver, missing %v (killed at %d)", tg.addr, len(vals[tg.addr]), missing, atKill[tg.addr])
	}
	ups, err := recv.seriesOf("up")
	if err != nil {
		fatal(t, err)
	}
	if err := checkSeriesClean(ups); err != nil {
		fail(t, err)
	}
	recv.checkNoRejections(t)
}
