package harness

import (
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/bench/loadgen"
)

// smokeOptions is a tiny load that still exercises every part of a run.
// Agents send a batch when it holds 2000 samples or after 5s (Prometheus'
// defaults, which shoal shares), so the load is just large enough (2400
// samples/s) that batches fill within the window.
func smokeOptions(t *testing.T) Options {
	return Options{
		Load:           loadgen.Config{Targets: 4, Series: 400, Skew: 3, LargeFraction: 0.25},
		ScrapeInterval: time.Second,
		Warmup:         4 * time.Second,
		Duration:       8 * time.Second,
		WorkDir:        t.TempDir(),
	}
}

// checkSane asserts that a measured result is plausible: samples arrived,
// every target series was delivered, CPU and memory were measured.
func checkSane(t *testing.T, r Result) {
	t.Helper()
	if r.Err != "" {
		t.Errorf("%s: %s", r.Agent.Name, r.Err)
		return
	}
	if r.Samples <= 0 || r.SamplesPerSec <= 0 {
		t.Errorf("%s: no samples delivered: %+v", r.Agent.Name, r)
	}
	if r.SeriesSeen < r.ActiveSeries {
		t.Errorf("%s: %d series delivered in the window, targets expose %d", r.Agent.Name, r.SeriesSeen, r.ActiveSeries)
	}
	if r.CPU <= 0 || r.CPUPerMillion <= 0 || math.IsInf(r.CPUPerMillion, 0) {
		t.Errorf("%s: CPU not measured: %v, %v s per million", r.Agent.Name, r.CPU, r.CPUPerMillion)
	}
	if r.RSSSteady <= 1<<20 || r.RSSPeak < r.RSSSteady/2 {
		t.Errorf("%s: RSS not measured: steady %d, peak %d", r.Agent.Name, r.RSSSteady, r.RSSPeak)
	}
	if math.IsNaN(r.LagP50) || r.LagP50 < -1 || r.FreshMax <= 0 {
		t.Errorf("%s: lag not measured: p50 %v, freshness max %v", r.Agent.Name, r.LagP50, r.FreshMax)
	}
	if r.Rejected != 0 {
		t.Errorf("%s: receiver rejected %d requests", r.Agent.Name, r.Rejected)
	}
	// Every agent is a Go program with go_memstats_* on its /metrics.
	if !r.Mem.OK || r.Mem.HeapInuse <= 0 || r.Mem.Goroutines <= 0 || r.Mem.RSS <= 0 {
		t.Errorf("%s: memory breakdown not read: %+v", r.Agent.Name, r.Mem)
	}
	if r.Version == "" || r.Version == "n/a" {
		t.Errorf("%s: no version", r.Agent.Name)
	}
}

// TestSmokeShoal runs the harness for a few seconds against shoal, one
// replica and a three-replica cluster, so the harness cannot rot.
func TestSmokeShoal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs shoal")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := filepath.Glob(filepath.Join(root, "cmd/shoal/*.go")); len(m) == 0 {
		t.Skip("cmd/shoal does not exist yet")
	}
	bin := filepath.Join(t.TempDir(), "shoal")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shoal")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shoal: %v\n%s", err, out)
	}
	opts := smokeOptions(t)
	b, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	agents := []Agent{
		{Name: "shoal", Kind: KindShoal, Binary: bin, Replicas: 1},
		{Name: "shoal x3", Kind: KindShoal, Binary: bin, Replicas: 3},
	}
	per := b.Rounds(t.Context(), agents, 1, nil)
	if len(per) != 2 || len(per[0]) != 1 || len(per[1]) != 1 {
		t.Fatalf("results %v", per)
	}
	results := []Result{per[0][0], per[1][0]}
	for _, r := range results {
		checkSane(t, r)
		// The runtime's breakdown is read from each replica's /metrics.
		if !r.Mem.OK || r.Mem.HeapInuse <= 0 || r.Mem.Stacks <= 0 || r.Mem.Goroutines <= 0 || r.Mem.RSSAnon <= 0 || r.Mem.RSSFile <= 0 {
			t.Errorf("%s: memory breakdown %+v", r.Agent.Name, r.Mem)
		}
	}
	if results[1].Replicas != 3 {
		t.Errorf("cluster result has %d replicas", results[1].Replicas)
	}
	if results[1].Mem.Goroutines <= results[0].Mem.Goroutines {
		t.Errorf("three replicas have %d goroutines, one has %d: not summed over processes", results[1].Mem.Goroutines, results[0].Mem.Goroutines)
	}
	rep := Report(results, opts, ThisMachine(), "go test", time.Now())
	if !strings.Contains(rep, "| shoal x3 |") || strings.Contains(rep, "not measured") {
		t.Errorf("report:\n%s", rep)
	}
	rep = ReportRounds(Summarize(per), SideSetup{Options: opts, Rounds: 1, Machine: ThisMachine(), Command: "go test", When: time.Now()})
	if strings.Contains(rep, "not measured") || strings.Contains(rep, "n/a") {
		t.Errorf("rounds report:\n%s", rep)
	}

	// Profiles from shoal's /debug/pprof over a short window. What is
	// asserted is what the harness does (both profiles fetched, parsed,
	// kept and reported, the CPU profile over the requested window), not
	// how much CPU a nearly idle process burned: its profile may hold no
	// sample at all.
	const window = 3 * time.Second
	p := b.Profile(t.Context(), agents[0], window)
	checkSane(t, p)
	switch {
	case p.Profile == nil:
		t.Error("no profiles")
	case p.Profile.Err != "":
		t.Errorf("profiles: %s", p.Profile.Err)
	default:
		pr := p.Profile
		if pr.Heap.Total <= 0 || len(pr.Heap.Flat) == 0 || len(pr.Heap.Cum) == 0 || pr.Heap.Unit != "bytes" {
			t.Errorf("heap summary %+v", pr.Heap)
		}
		// The profiler runs for the window, however loaded the machine.
		if pr.CPU.SampleType != "cpu" || pr.CPU.Unit != "nanoseconds" || pr.CPU.Duration < window-100*time.Millisecond {
			t.Errorf("CPU summary %+v; want sample type cpu in nanoseconds over at least %v", pr.CPU, window)
		}
		for _, f := range []string{pr.CPUPath, pr.HeapPath} {
			if st, err := os.Stat(f); err != nil || st.Size() == 0 {
				t.Errorf("raw profile %q: %v", f, err)
			}
		}
		rep := ReportProfile(p, opts, ThisMachine(), "go test", time.Now())
		for _, section := range []string{"**Where RSS goes**", "**Heap in use:", "**CPU: "} {
			if !strings.Contains(rep, section) {
				t.Errorf("profile report without %q:\n%s", section, rep)
			}
		}
	}
	if t.Failed() {
		for _, name := range []string{"shoal/shoal-0.log", "shoal x3/shoal-0.log"} {
			b, _ := os.ReadFile(filepath.Join(opts.WorkDir, name))
			t.Logf("%s:\n%s", name, tail(string(b), 30))
		}
	}
}

// TestSmokePeers runs the harness against the peers built by
// bench/build-peers.sh. Opt-in (SHOAL_BENCH_PEERS=1): CI does not build them.
func TestSmokePeers(t *testing.T) {
	if os.Getenv("SHOAL_BENCH_PEERS") == "" {
		t.Skip("set SHOAL_BENCH_PEERS=1 after bench/build-peers.sh to run")
	}
	cache := os.Getenv("SHOAL_BENCH_CACHE")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache", "shoal-bench")
	}
	results, err := Run(t.Context(), smokeOptions(t), []Agent{
		{Name: "prometheus --agent", Kind: KindPrometheus, Binary: filepath.Join(cache, "prometheus")},
		{Name: "vmagent", Kind: KindVMAgent, Binary: filepath.Join(cache, "vmagent")},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range results {
		checkSane(t, r)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
