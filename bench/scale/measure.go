package scale

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/bench/loadgen"
	"github.com/shoal-dev/shoal/internal/receiver"
)

// GapStats summarises, over a phase, the receiver's view of every target:
// its samples of `up` (one per scrape) between the phase's start and end.
type GapStats struct {
	// Longest is the longest time any target went without a sample,
	// counting the edges of the window, and Target is which.
	Longest time.Duration
	Target  string
	// Missed is how many scrapes are missing over all targets: a gap of k
	// intervals (rounded) is k-1 missed scrapes.
	Missed int
	// Silent counts targets with no sample at all in the window.
	Silent int
}

// Gaps computes GapStats from sample timestamps (milliseconds, sorted per
// series) over [from, to]. A series with no sample in the window counts as
// silent and its gap is the whole window.
func Gaps(series map[string][]int64, from, to time.Time, interval time.Duration) GapStats {
	var g GapStats
	f, t := from.UnixMilli(), to.UnixMilli()
	names := make([]string, 0, len(series))
	for n := range series {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		prev, delivered := f, false
		longest := time.Duration(0)
		note := func(gap int64) {
			d := time.Duration(gap) * time.Millisecond
			longest = max(longest, d)
			if k := int(math.Round(float64(d) / float64(interval))); k > 1 {
				g.Missed += k - 1
			}
		}
		for _, ts := range series[name] {
			if ts < f || ts > t {
				continue
			}
			delivered = true
			note(ts - prev)
			prev = ts
		}
		note(t - prev)
		if !delivered {
			g.Silent++
		}
		if longest > g.Longest {
			g.Longest, g.Target = longest, name
		}
	}
	return g
}

// Undelivered counts the targets whose samples have not reached until:
// series with no sample at or after it, and, when fewer than targets series
// exist, the targets that delivered none at all. Samples of one series
// arrive in order, so once a target's sample at or after until is in, every
// gap before until is final.
func Undelivered(series map[string][]int64, targets int, until time.Time) int {
	t, n := until.UnixMilli(), 0
	for _, ts := range series {
		if len(ts) == 0 || ts[len(ts)-1] < t {
			n++
		}
	}
	return n + max(targets-len(series), 0)
}

// Uncovered counts the targets not scraped since t.
func Uncovered(per []loadgen.TargetScrapes, since time.Time) int {
	n := 0
	for _, s := range per {
		if s.Last.Before(since) {
			n++
		}
	}
	return n
}

// DoubleScraped lists the targets scraped more often between two snapshots
// than one scraper could: more than window/interval + 1 times. A target
// owned by two replicas at once is scraped about twice as often. A slow
// machine only delays scrapes, so this cannot fire from load.
func DoubleScraped(before, after []loadgen.TargetScrapes, window, interval time.Duration) []int {
	limit := int64(window/interval) + 1
	var out []int
	for i := range min(len(before), len(after)) {
		if after[i].Count-before[i].Count > limit {
			out = append(out, i)
		}
	}
	return out
}

// Refusals is what the receiver refused between two readings: samples
// rejected (out of order, duplicate, too old, invalid) and samples rolled
// back with the request they came in.
type Refusals struct {
	Rejected   uint64
	RolledBack uint64
}

// Total is every sample the receiver did not keep for a refusal.
func (r Refusals) Total() uint64 { return r.Rejected + r.RolledBack }

// RefusalsBetween subtracts two receiver readings.
func RefusalsBetween(before, after receiver.Stats) Refusals {
	return Refusals{
		Rejected:   after.Rejected() - before.Rejected(),
		RolledBack: after.RolledBack - before.RolledBack,
	}
}

// CPUTimes is the machine's CPU time from /proc/stat, in clock ticks.
type CPUTimes struct{ Busy, Total uint64 }

// ParseProcStat reads the aggregate "cpu" line of /proc/stat: every field
// is time spent; idle and iowait are not busy.
func ParseProcStat(b []byte) (CPUTimes, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var c CPUTimes
		// user nice system idle iowait irq softirq steal (guest fields
		// are already inside user and nice).
		for i, s := range f[1:min(len(f), 9)] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return CPUTimes{}, fmt.Errorf("/proc/stat: %w", err)
			}
			c.Total += v
			if i != 3 && i != 4 {
				c.Busy += v
			}
		}
		return c, nil
	}
	return CPUTimes{}, fmt.Errorf("/proc/stat: no cpu line")
}

// MachineCPU reads /proc/stat now.
func MachineCPU() (CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUTimes{}, err
	}
	return ParseProcStat(b)
}

// BusyShare is the share of the machine's CPU time that was busy between
// two readings (0..1).
func BusyShare(before, after CPUTimes) float64 {
	total := after.Total - before.Total
	if total == 0 || after.Total < before.Total {
		return 0
	}
	return float64(after.Busy-before.Busy) / float64(total)
}
