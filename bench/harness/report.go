package harness

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Machine describes the host a run was measured on.
type Machine struct {
	CPUs     int
	Model    string
	MemBytes int64
	Kernel   string
	Go       string
}

// ThisMachine reads the host description from /proc.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), Go: runtime.Version(), Model: "unknown"}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.Model = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemBytes = kb << 10
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

func (m Machine) String() string {
	return fmt.Sprintf("%d CPUs (nproc), %s, %.1f GiB memory, Linux %s, %s", m.CPUs, m.Model, float64(m.MemBytes)/(1<<30), m.Kernel, m.Go)
}

func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }

func num(f float64, prec int) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "–"
	}
	return strconv.FormatFloat(f, 'f', prec, 64)
}

// Report renders the results of one run as Markdown: the setup (machine,
// versions, command, load), a table of absolute figures and a table of
// ratios of each shoal variant against each peer measured in the same run.
func Report(results []Result, opts Options, m Machine, command string, when time.Time) string {
	opts = opts.withDefaults()
	load := opts.Load
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on **%s**.\n\n", when.UTC().Format("2006-01-02 15:04 MST"), m)
	fmt.Fprintf(&b, "Command: `%s`\n\n", command)
	active := 0
	if len(results) > 0 {
		active = results[0].ActiveSeries
	}
	skew := "uniform"
	if load.Skew > 1 {
		lf := load.LargeFraction
		if lf == 0 {
			lf = 0.02
		}
		skew = fmt.Sprintf("skewed: %.0f%% of the targets expose %.0fx more series", 100*lf, load.Skew)
	}
	fmt.Fprintf(&b, "Load: %d targets (one loopback port each), %d series per small target, %s; %d active series in total "+
		"(counters, gauges, classic histograms; every value changes on every scrape). Scrape interval %s for every agent; "+
		"warm-up %s, then a %s measurement window per agent, agents one after another. "+
		"Every agent remote-writes to the same in-process counting receiver (`bench/sink`: snappy + protobuf decoded, samples and series counted, nothing stored).\n\n",
		load.Targets, load.Series, skew, active, opts.ScrapeInterval, opts.Warmup, opts.Duration)

	fmt.Fprintf(&b, "| agent | version | processes | samples/s delivered | series seen | CPU s per 1M samples | CPU cores used | steady RSS | peak RSS | steady bytes/series | peak bytes/series | lag p50 / p99 | freshness mean / max |\n")
	fmt.Fprintf(&b, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		if r.Err != "" {
			fmt.Fprintf(&b, "| %s | %s | %d | **not measured**: %s |||||||||\n", r.Agent.Name, r.Version, r.Replicas, oneLine(r.Err))
			continue
		}
		st, pk := r.BytesPerSeries()
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %d | %s | %s | %s | %s | %s | %s | %s s / %s s | %s s / %s s |\n",
			r.Agent.Name, r.Version, r.Replicas, num(r.SamplesPerSec, 0), r.SeriesSeen, num(r.CPUPerMillion, 2),
			num(r.CPU.Seconds()/r.Window.Seconds(), 3), mib(r.RSSSteady), mib(r.RSSPeak), num(st, 0), num(pk, 0),
			num(r.LagP50, 2), num(r.LagP99, 2), num(r.FreshMean, 2), num(r.FreshMax, 2))
	}
	if len(results) > 0 && results[0].ExpectedPerSec > 0 {
		fmt.Fprintf(&b, "\nA complete agent delivers %s samples/s of target series plus its own per-target series (`up`, `scrape_*`). ",
			num(results[0].ExpectedPerSec, 0))
	}
	b.WriteString("CPU is user+system time from `/proc/<pid>/stat` over the window, summed over an agent's processes; steady RSS is the median of `VmRSS` sampled every second (summed over processes), peak RSS the sum of `VmHWM`; bytes/series divide by the active series. " +
		"Lag is per remote-write request: arrival time minus the newest sample in it; freshness is sampled every second: now minus the newest sample the receiver has.\n")
	for _, r := range results {
		if r.Err == "" && r.Window > 0 {
			fmt.Fprintf(&b, "The load generator and receiver (the harness process) used %s CPU cores while %s was measured.\n",
				num(r.HarnessCPU.Seconds()/r.Window.Seconds(), 3), r.Agent.Name)
			break
		}
	}

	// Ratios of each shoal variant against each peer.
	var shoals, peers []Result
	for _, r := range results {
		if r.Err != "" {
			continue
		}
		if r.Agent.Kind == KindShoal {
			shoals = append(shoals, r)
		} else {
			peers = append(peers, r)
		}
	}
	if len(shoals) > 0 && len(peers) > 0 {
		b.WriteString("\n**Ratios from this run** (shoal ÷ peer; below 1 means shoal uses less):\n\n| metric |")
		for _, s := range shoals {
			for _, p := range peers {
				fmt.Fprintf(&b, " %s ÷ %s |", s.Agent.Name, p.Agent.Name)
			}
		}
		b.WriteString("\n|---|")
		for range len(shoals) * len(peers) {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		rows := []struct {
			name string
			f    func(Result) float64
		}{
			{"CPU s per 1M samples", func(r Result) float64 { return r.CPUPerMillion }},
			{"steady RSS per series", func(r Result) float64 { s, _ := r.BytesPerSeries(); return s }},
			{"peak RSS per series", func(r Result) float64 { _, p := r.BytesPerSeries(); return p }},
			{"samples/s delivered", func(r Result) float64 { return r.SamplesPerSec }},
			{"lag p99", func(r Result) float64 { return r.LagP99 }},
		}
		for _, row := range rows {
			fmt.Fprintf(&b, "| %s |", row.name)
			for _, s := range shoals {
				for _, p := range peers {
					fmt.Fprintf(&b, " %s |", num(row.f(s)/row.f(p), 2))
				}
			}
			b.WriteString("\n")
		}
	}
	var missing []string
	for _, r := range results {
		if r.Err != "" {
			missing = append(missing, fmt.Sprintf("- %s: %s", r.Agent.Name, oneLine(r.Err)))
		}
	}
	if len(missing) > 0 {
		b.WriteString("\nNot measured in this run:\n\n" + strings.Join(missing, "\n") + "\n")
	}
	return b.String()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "\n", " ⏎ ")
	if len(s) > 600 {
		s = s[:600] + "…"
	}
	return s
}

// cell renders a spread as "median (min–max)", or the median alone when
// one round gave it.
func cell(s Spread, f func(float64) string) string {
	switch {
	case s.N == 0:
		return "–"
	case s.N == 1 || f(s.Min) == f(s.Max):
		return f(s.Median)
	}
	return f(s.Median) + " (" + f(s.Min) + "–" + f(s.Max) + ")"
}

func fixed(prec int) func(float64) string { return func(f float64) string { return num(f, prec) } }

func mibf(f float64) string {
	if math.IsNaN(f) {
		return "–"
	}
	return fmt.Sprintf("%.0f MiB", f/(1<<20))
}

// roundOrder describes the order of each round in words.
func roundOrder(names []string, rounds int) string {
	var parts []string
	for r := range rounds {
		var o []string
		for _, i := range Order(len(names), r) {
			o = append(o, names[i])
		}
		parts = append(parts, fmt.Sprintf("round %d: %s", r+1, strings.Join(o, ", ")))
	}
	return strings.Join(parts, "; ")
}

// SideSetup is what a multi-round side-by-side run was, for the report.
type SideSetup struct {
	Options Options
	Rounds  int
	Machine Machine
	Command string
	When    time.Time
}

// ReportRounds renders a multi-round side-by-side run: every agent's median
// and range over the rounds, the ratios of the medians, where the memory
// goes, and every round's figures.
func ReportRounds(sums []Summary, su SideSetup) string {
	opts := su.Options.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on **%s**.\n\nCommand: `%s`\n\n", su.When.UTC().Format("2006-01-02 15:04 MST"), su.Machine, su.Command)
	active := 0
	var names []string
	for _, s := range sums {
		names = append(names, s.Agent.Name)
		active = s.ActiveSeries
	}
	fmt.Fprintf(&b, "Load: %s; %d active series in total (counters, gauges, classic histograms; every value changes on every scrape). "+
		"Scrape interval %s for every agent. **%d rounds**; in each round every agent runs alone in turn, a warm-up of %s then a measurement window of %s, "+
		"in an order that alternates between rounds (%s). "+
		"Every agent remote-writes to the same in-process counting receiver (`bench/sink`: snappy + protobuf decoded, samples and series counted, nothing stored).\n\n",
		describeLoad(opts), active, opts.ScrapeInterval, su.Rounds, opts.Warmup, opts.Duration, roundOrder(names, su.Rounds))

	b.WriteString("Each cell is the **median over the rounds, with the range (min–max) in parentheses**.\n\n")
	b.WriteString("| agent | version | processes | rounds | samples/s delivered | CPU s per 1M samples | CPU cores used | steady RSS | steady bytes/series | peak bytes/series | lag p99 | freshness max |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sums {
		if s.OK == 0 {
			fmt.Fprintf(&b, "| %s | %s | %d | 0 of %d | **not measured**: %s |||||||\n", s.Agent.Name, s.Version, max(s.Agent.Replicas, 1), len(s.Rounds), oneLine(firstErr(s.Rounds)))
			continue
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d of %d | %s | %s | %s | %s | %s | %s | %s s | %s s |\n",
			s.Agent.Name, s.Version, max(s.Agent.Replicas, 1), s.OK, len(s.Rounds),
			cell(s.SamplesPerSec, fixed(0)), cell(s.CPUPerMillion, fixed(2)), cell(s.CoresUsed, fixed(3)),
			cell(s.RSSSteady, mibf), cell(s.BytesPerSeries, fixed(0)), cell(s.PeakPerSeries, fixed(0)),
			cell(s.LagP99, fixed(2)), cell(s.FreshMax, fixed(2)))
	}
	if len(sums) > 0 && sums[0].ExpectedPerSec > 0 {
		fmt.Fprintf(&b, "\nA complete agent delivers %s samples/s of target series plus its own per-target series (`up`, `scrape_*`). ", num(sums[0].ExpectedPerSec, 0))
	}
	b.WriteString("CPU is user+system time from `/proc/<pid>/stat` over the window, summed over an agent's processes; steady RSS is the median of `VmRSS` sampled every second (summed over processes), peak the sum of `VmHWM`; bytes/series divide by the active series. " +
		"Lag is per remote-write request: arrival time minus the newest sample in it; freshness is sampled every second: now minus the newest sample the receiver has.")
	for _, s := range sums {
		if s.HarnessCores.N > 0 {
			fmt.Fprintf(&b, " The load generator and receiver (the harness process) used %s CPU cores while %s was measured.", cell(s.HarnessCores, fixed(3)), s.Agent.Name)
			break
		}
	}
	b.WriteString("\n")

	b.WriteString("\n" + RatioTable(sums))

	b.WriteString("\n**Where the memory goes** (the round with the median steady RSS, at the end of its window; summed over processes): " +
		"RSS split by the kernel into anonymous and file-backed pages (`/proc/<pid>/status`), and the Go runtime's `go_memstats_*` from each agent's `/metrics`. " +
		"*Heap idle kept* is free heap the runtime has not returned to the OS (`heap_idle − heap_released`); *other* is anonymous RSS the heap and stacks do not explain: runtime metadata, less any heap the runtime counts in use whose pages were never touched and so are not resident (it can be negative).\n\n")
	var rows []memRow
	for _, s := range sums {
		rows = append(rows, memRow{s.Agent.Name, max(s.Agent.Replicas, 1), s.Mem})
	}
	b.WriteString(memTable(rows))

	b.WriteString("\n<details><summary>Every round</summary>\n\n*warm-up* is how long the agent ran before its window: the warm-up, longer when it had not yet delivered 90% of the expected samples over two scrape intervals (`--settle`).\n\n" +
		"| round | position | agent | warm-up | samples/s | CPU s per 1M samples | steady RSS | peak RSS | lag p99 |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for r := range su.Rounds {
		for _, i := range Order(len(sums), r) {
			s := sums[i]
			if r >= len(s.Rounds) {
				continue
			}
			x := s.Rounds[r]
			if x.Err != "" {
				fmt.Fprintf(&b, "| %d | %d | %s | **failed**: %s |||||\n", r+1, x.Position+1, s.Agent.Name, oneLine(x.Err))
				continue
			}
			fmt.Fprintf(&b, "| %d | %d | %s | %s s | %s | %s | %s | %s | %s s |\n", r+1, x.Position+1, s.Agent.Name, num(x.WarmedUp.Seconds(), 0),
				num(x.SamplesPerSec, 0), num(x.CPUPerMillion, 2), mib(x.RSSSteady), mib(x.RSSPeak), num(x.LagP99, 2))
		}
	}
	b.WriteString("\n</details>\n")

	var missing []string
	for _, s := range sums {
		for _, x := range s.Rounds {
			if x.Err != "" {
				missing = append(missing, fmt.Sprintf("- %s, round %d: %s", s.Agent.Name, x.Round+1, oneLine(x.Err)))
			}
		}
	}
	if len(missing) > 0 {
		b.WriteString("\nNot measured:\n\n" + strings.Join(missing, "\n") + "\n")
	}
	return b.String()
}

func firstErr(rs []Result) string {
	for _, r := range rs {
		if r.Err != "" {
			return r.Err
		}
	}
	return ""
}

func describeLoad(o Options) string {
	load := o.Load
	skew := "every target the same size"
	if load.Skew > 1 {
		lf := load.LargeFraction
		if lf == 0 {
			lf = 0.02
		}
		skew = fmt.Sprintf("skewed: %.0f%% of the targets expose %.0fx more series", 100*lf, load.Skew)
	}
	return fmt.Sprintf("%d targets (one loopback port each), %d series per (small) target, %s", load.Targets, load.Series, skew)
}

// Ratio is one cell of the ratio table: a ÷ b of one metric's medians.
type Ratio struct {
	Metric string
	A, B   string // agent names
	Value  float64
}

// ratioMetrics are the rows of the ratio table.
var ratioMetrics = []struct {
	name string
	f    func(Summary) Spread
}{
	{"CPU s per 1M samples", func(s Summary) Spread { return s.CPUPerMillion }},
	{"steady RSS per series", func(s Summary) Spread { return s.BytesPerSeries }},
	{"peak RSS per series", func(s Summary) Spread { return s.PeakPerSeries }},
	{"samples/s delivered", func(s Summary) Spread { return s.SamplesPerSec }},
}

// Ratios returns, for every metric, each shoal variant's median over each
// peer's, and a several-replica shoal's over the one-replica shoal's.
func Ratios(sums []Summary) []Ratio {
	var pairs [][2]Summary
	for _, a := range sums {
		if a.Agent.Kind != KindShoal || a.OK == 0 {
			continue
		}
		for _, b := range sums {
			if b.Agent.Kind != KindShoal && b.OK > 0 {
				pairs = append(pairs, [2]Summary{a, b})
			}
		}
	}
	if x, ok := find(sums, roleShoalCluster); ok {
		if y, ok := find(sums, roleShoal); ok {
			pairs = append(pairs, [2]Summary{x, y})
		}
	}
	var out []Ratio
	for _, m := range ratioMetrics {
		for _, p := range pairs {
			out = append(out, Ratio{Metric: m.name, A: p[0].Agent.Name, B: p[1].Agent.Name, Value: m.f(p[0]).Median / m.f(p[1]).Median})
		}
	}
	return out
}

// RatioTable renders Ratios as a table, one column per pair.
func RatioTable(sums []Summary) string {
	rs := Ratios(sums)
	if len(rs) == 0 {
		return ""
	}
	var cols []string
	seen := map[string]bool{}
	for _, r := range rs {
		c := r.A + " ÷ " + r.B
		if !seen[c] {
			seen[c] = true
			cols = append(cols, c)
		}
	}
	var b strings.Builder
	b.WriteString("**Ratios of the medians** (below 1 means the first uses less):\n\n| metric |")
	for _, c := range cols {
		b.WriteString(" " + c + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(cols)) + "\n")
	for i, r := range rs {
		if i%len(cols) == 0 {
			fmt.Fprintf(&b, "| %s |", r.Metric)
		}
		fmt.Fprintf(&b, " %s |", num(r.Value, 2))
		if i%len(cols) == len(cols)-1 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// memTable renders memory breakdowns, one row per agent.
type memRow struct {
	name  string
	procs int
	m     MemBreakdown
}

func memTable(rows []memRow) string {
	var b strings.Builder
	b.WriteString("| agent | processes | RSS | anonymous | file-backed | heap in use | heap idle kept | stacks | other | goroutines |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range rows {
		name, procs, m := row.name, row.procs, row.m
		if !m.OK {
			why := m.Err
			if why == "" {
				why = "not measured"
			}
			fmt.Fprintf(&b, "| %s | %d | n/a: %s ||||||||\n", name, procs, oneLine(why))
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %d |\n", name, procs, mib(m.RSS), mib(m.RSSAnon), mib(m.RSSFile),
			mib(m.HeapInuse), mib(m.HeapIdleUnreleased), mib(m.Stacks), mib(m.OtherAnon()), m.Goroutines)
	}
	return b.String()
}

// ReportIdle renders the idle point: every agent scraping a few targets,
// i.e. what one replica costs before any real load.
func ReportIdle(rs []Result, opts Options, m Machine, command string, when time.Time) string {
	opts = opts.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s. Command: `%s`\n\n", when.UTC().Format("2006-01-02 15:04 MST"), m, command)
	fmt.Fprintf(&b, "Load: %s (%d series); scrape interval %s; a warm-up of %s, a window of %s, one round, agents one after another. Steady RSS is the median of `VmRSS` over the window; *per process* divides by the agent's processes — the fixed cost each replica adds.\n\n",
		describeLoad(opts), opts.Load.TotalSeries(), opts.ScrapeInterval, opts.Warmup, opts.Duration)
	b.WriteString("| agent | processes | steady RSS | per process | CPU cores used |\n|---|---:|---:|---:|---:|\n")
	for _, r := range rs {
		if r.Err != "" {
			fmt.Fprintf(&b, "| %s | %d | **not measured**: %s |||\n", r.Agent.Name, r.Replicas, oneLine(r.Err))
			continue
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s |\n", r.Agent.Name, r.Replicas, mib(r.RSSSteady), mib(r.RSSSteady/int64(max(r.Replicas, 1))), num(r.CoresUsed(), 3))
	}
	b.WriteString("\nWhere the memory goes at the end of the window (summed over processes; columns as in the side-by-side table):\n\n")
	var rows []memRow
	for _, r := range rs {
		m := r.Mem
		if r.Err != "" {
			m = MemBreakdown{Err: "not measured"}
		}
		rows = append(rows, memRow{r.Agent.Name, r.Replicas, m})
	}
	b.WriteString(memTable(rows))
	return b.String()
}

// ReportGrowth renders the memory-growth curve: steady RSS per agent at
// each point, the average per series, and the marginal bytes per series
// between neighbouring points.
func ReportGrowth(points []GrowthPoint, warmup, window time.Duration, m Machine, command string, when time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s. Command: `%s`\n\n", when.UTC().Format("2006-01-02 15:04 MST"), m, command)
	if len(points) == 0 {
		return b.String() + "No point was measured.\n"
	}
	var desc []string
	for _, p := range points {
		desc = append(desc, fmt.Sprintf("%d targets × %d series, scrape interval %s, %d round(s)", p.Targets, p.Series/max(p.Targets, 1), p.Interval, p.Rounds))
	}
	fmt.Fprintf(&b, "Points: %s. At each point every agent runs alone, a warm-up of %s (longer, up to `--growth-settle`, until it delivers 90%% of the expected samples over two intervals) then a window of %s, per round (the median of the rounds where more than one), the order of the agents rotating from point to point and round to round. "+
		"The cell is the median steady RSS, then bytes per active series; *marginal* is the RSS added per series added between two points, (RSS₂ − RSS₁) / (series₂ − series₁): "+
		"the cost of one more series without the fixed part. An agent that delivered less than 95%% of the expected samples at a point is marked ⚠ (its memory then reflects a backlog, not steady state).\n\n",
		strings.Join(desc, "; "), warmup, window)
	// Agents in the order of the first point.
	var names []string
	for _, s := range points[0].Agents {
		names = append(names, s.Agent.Name)
	}
	b.WriteString("| agent |")
	for i, p := range points {
		fmt.Fprintf(&b, " %s series |", human(p.Series))
		if i > 0 {
			fmt.Fprintf(&b, " marginal %s→%s |", human(points[i-1].Series), human(p.Series))
		}
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", 2*len(points)-1) + "\n")
	for _, name := range names {
		fmt.Fprintf(&b, "| %s |", name)
		var prev *Summary
		var prevSeries int
		for i, p := range points {
			var s *Summary
			for j := range p.Agents {
				if p.Agents[j].Agent.Name == name {
					s = &p.Agents[j]
				}
			}
			switch {
			case s == nil:
				b.WriteString(" – |")
			case s.OK == 0:
				fmt.Fprintf(&b, " **failed**: %s |", oneLine(firstErr(s.Rounds)))
			default:
				warn := ""
				if s.ExpectedPerSec > 0 && s.SamplesPerSec.Median < 0.95*s.ExpectedPerSec {
					warn = fmt.Sprintf(" ⚠ %.0f%% delivered", 100*s.SamplesPerSec.Median/s.ExpectedPerSec)
				}
				fmt.Fprintf(&b, " %s, %s B/series%s |", mibf(s.RSSSteady.Median), num(s.BytesPerSeries.Median, 0), warn)
			}
			if i > 0 {
				if s != nil && prev != nil && s.OK > 0 && prev.OK > 0 {
					fmt.Fprintf(&b, " %s B |", num(Marginal(prev.RSSSteady.Median, s.RSSSteady.Median, prevSeries, p.Series), 0))
				} else {
					b.WriteString(" – |")
				}
			}
			prev, prevSeries = s, p.Series
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Marginal is the RSS added per series added between two points.
func Marginal(rss1, rss2 float64, series1, series2 int) float64 {
	if series2 == series1 {
		return math.NaN()
	}
	return (rss2 - rss1) / float64(series2-series1)
}

// human writes 100000 as 100k and 1000000 as 1M.
func human(n int) string {
	switch {
	case n >= 1_000_000 && n%100_000 == 0:
		return strconv.FormatFloat(float64(n)/1e6, 'f', -1, 64) + "M"
	case n >= 1000 && n%100 == 0:
		return strconv.FormatFloat(float64(n)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.Itoa(n)
}

// ReportProfile renders the profiles of one shoal replica.
func ReportProfile(r Result, opts Options, m Machine, command string, when time.Time) string {
	opts = opts.withDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s. Command: `%s`\n\n", when.UTC().Format("2006-01-02 15:04 MST"), m, command)
	fmt.Fprintf(&b, "%s (%s), one process, at the side-by-side load: %s, %d series, scrape interval %s; a warm-up of %s, then a CPU profile over a window of %s from its `/debug/pprof/profile` "+
		"and, at the window's end, a heap profile (`/debug/pprof/heap?gc=1`, in-use bytes after a collection) and its `/metrics`.\n\n",
		r.Agent.Name, r.Version, describeLoad(opts), r.ActiveSeries, opts.ScrapeInterval, opts.Warmup, opts.Duration)
	if r.Err != "" {
		return b.String() + "**Not measured:** " + oneLine(r.Err) + "\n"
	}
	fmt.Fprintf(&b, "In the window: %s samples/s delivered, %s CPU s per 1M samples (with the profiler on), steady RSS %s (%s bytes per series).\n\n",
		num(r.SamplesPerSec, 0), num(r.CPUPerMillion, 2), mib(r.RSSSteady), num(float64(r.RSSSteady)/float64(max(r.ActiveSeries, 1)), 0))
	b.WriteString("**Where RSS goes** (columns as in the side-by-side table):\n\n")
	b.WriteString(memTable([]memRow{{r.Agent.Name, r.Replicas, r.Mem}}))
	if r.Profile == nil {
		return b.String()
	}
	if r.Profile.Err != "" {
		fmt.Fprintf(&b, "\n**Profile missing:** %s\n", oneLine(r.Profile.Err))
	}
	if len(r.Profile.Heap.Flat) > 0 {
		h := r.Profile.Heap
		fmt.Fprintf(&b, "\n**Heap in use: %s** in the profile (live objects after a collection; the runtime's figures above add fragmentation and free spans).\n\n", mib(h.Total))
		b.WriteString(profileTables(h, func(v int64) string { return fmt.Sprintf("%.1f MiB", float64(v)/(1<<20)) }))
	}
	// A CPU profile with no samples (an idle window) still gets its line.
	if r.Profile.CPU.Duration > 0 {
		c := r.Profile.CPU
		secs := c.Duration.Seconds()
		fmt.Fprintf(&b, "\n**CPU: %.1f s over %.0f s** (%.3f cores).\n\n", float64(c.Total)/1e9, secs, float64(c.Total)/1e9/math.Max(secs, 1e-9))
		b.WriteString(profileTables(c, func(v int64) string { return fmt.Sprintf("%.2f s", float64(v)/1e9) }))
	}
	return b.String()
}

// profileTables renders the top of a profile by flat and by cumulative
// value side by side.
func profileTables(p ProfileSummary, f func(int64) string) string {
	var b strings.Builder
	b.WriteString("| # | flat (in the function itself) | flat | share | cumulative (with callees) | cum | share |\n|---:|---|---:|---:|---|---:|---:|\n")
	share := func(v int64) string {
		if p.Total == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(v)/float64(p.Total))
	}
	for i := range max(len(p.Flat), len(p.Cum)) {
		fmt.Fprintf(&b, "| %d |", i+1)
		for _, list := range [][]ProfileEntry{p.Flat, p.Cum} {
			if i < len(list) {
				fmt.Fprintf(&b, " `%s` | %s | %s |", shortFunc(list[i].Func), f(list[i].Value), share(list[i].Value))
			} else {
				b.WriteString(" | | |")
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// shortFunc drops the module path prefixes that make names long without
// telling more: github.com/shoal-dev/shoal/wal.(*WAL).Append reads as
// wal.(*WAL).Append, github.com/prometheus/prometheus/tsdb/wlog.X as
// prometheus/tsdb/wlog.X.
func shortFunc(f string) string {
	for _, p := range []string{"github.com/shoal-dev/shoal/", "github.com/prometheus/prometheus/", "github.com/"} {
		if rest, ok := strings.CutPrefix(f, p); ok {
			if p == "github.com/prometheus/prometheus/" {
				return "prometheus/" + rest
			}
			return rest
		}
	}
	return f
}

// ReportGoals renders the performance goals against this run.
func ReportGoals(goals []Goal, m Machine, command string, when time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Judged %s on %s. Command: `%s`\n\n", when.UTC().Format("2006-01-02 15:04 MST"), m, command)
	b.WriteString("| goal | limit | this run | verdict | from |\n|---|---:|---:|---|---|\n")
	for _, g := range goals {
		val := "–"
		if g.Measured() {
			prec := 2
			if g.Unit == "MiB" {
				prec = 0
			}
			val = num(g.Value, prec) + " " + g.Unit
		}
		limit := "≤ " + num(g.Limit, 2) + " " + g.Unit
		if g.Unit == "MiB" {
			limit = "≤ " + num(g.Limit, 0) + " MiB"
		}
		verdict := g.Verdict()
		if g.Met() {
			verdict = "**met**"
		} else if g.Measured() {
			verdict = "**" + verdict + "**"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", g.What, limit, val, verdict, g.Source)
	}
	return b.String()
}

// MinHeadlineRounds is the fewest side-by-side rounds whose figures may be
// quoted as the README's headline.
const MinHeadlineRounds = 3

// Headline renders the README's performance table from one run: medians
// over the side-by-side rounds, the idle point and the growth curve's
// largest point.
func Headline(sums []Summary, su SideSetup, idle []Result, growth []GrowthPoint, goals []Goal) string {
	var b strings.Builder
	active := 0
	for _, s := range sums {
		active = s.ActiveSeries
	}
	fmt.Fprintf(&b, "From one `make bench` run (%s, %d CPUs): medians of %d rounds, agents in alternating order, %s active series scraped every %s; "+
		"the ranges, the method and the caveats are in [docs/BENCHMARKS.md](docs/BENCHMARKS.md).\n\n",
		su.When.UTC().Format("2006-01-02"), su.Machine.CPUs, su.Rounds, group(active), su.Options.withDefaults().ScrapeInterval)
	var last *GrowthPoint
	if len(growth) > 0 {
		last = &growth[len(growth)-1]
	}
	b.WriteString("| | CPU s per 1M samples | memory per active series | idle RSS per replica |")
	if last != nil {
		fmt.Fprintf(&b, " memory per series at %s |", human(last.Series))
	}
	b.WriteString("\n|---|---:|---:|---:|")
	if last != nil {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, s := range sums {
		name := s.Agent.Name
		if s.Agent.Kind == KindShoal {
			name = fmt.Sprintf("shoal, %d replicas (summed)", s.Agent.Replicas)
			if s.Agent.Replicas <= 1 {
				name = "shoal, one replica"
			}
		}
		idleCell := "–"
		for _, r := range idle {
			if r.Agent.Name == s.Agent.Name && r.Err == "" {
				idleCell = mib(r.RSSSteady / int64(max(r.Replicas, 1)))
			}
		}
		if s.OK == 0 {
			fmt.Fprintf(&b, "| %s | not measured | | %s |", name, idleCell)
		} else {
			fmt.Fprintf(&b, "| %s | %s | %s KB | %s |", name, num(s.CPUPerMillion.Median, 2), num(s.BytesPerSeries.Median/1000, 2), idleCell)
		}
		if last != nil {
			c := "–"
			for _, g := range last.Agents {
				if g.Agent.Name == s.Agent.Name && g.OK > 0 {
					c = num(g.BytesPerSeries.Median/1000, 2) + " KB"
				}
			}
			b.WriteString(" " + c + " |")
		}
		b.WriteString("\n")
	}
	met, measured := 0, 0
	for _, g := range goals {
		if g.Measured() {
			measured++
		}
		if g.Met() {
			met++
		}
	}
	fmt.Fprintf(&b, "\nThe performance goals: %d of %d met in this run (%d measured); docs/BENCHMARKS.md (\"Goals\") lists each with its verdict.\n", met, len(goals), measured)
	return b.String()
}

// group writes 100000 as 100,000.
func group(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
