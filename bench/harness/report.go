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
