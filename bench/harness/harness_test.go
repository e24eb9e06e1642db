package harness

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shoal-dev/shoal/bench/loadgen"
)

func TestProcReaders(t *testing.T) {
	pid := os.Getpid()
	c0, err := ProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn 100ms of CPU, as the kernel counts it for getrusage, however
	// long that takes on a loaded machine; /proc must show it too.
	x := 0
	for start := rusageCPU(t); rusageCPU(t)-start < 100*time.Millisecond; {
		for i := range 1_000_000 {
			x += i ^ x
		}
	}
	if c1, err := ProcCPU(pid); err != nil || c1 <= c0 {
		t.Fatalf("CPU time %v, %v after 100ms of CPU burnt, was %v (x=%d)", c1, err, c0, x)
	}
	rss, hwm, err := ProcMem(pid)
	if err != nil {
		t.Fatal(err)
	}
	if rss <= 0 || hwm < rss {
		t.Fatalf("rss %d hwm %d", rss, hwm)
	}
	if _, err := ProcCPU(1 << 30); err == nil {
		t.Fatal("no error for a missing process")
	}
	if _, _, err := ProcMem(1 << 30); err == nil {
		t.Fatal("no error for a missing process")
	}
}

func TestUpdateSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "B.md")
	if err := os.WriteFile(path, []byte("# Title\n\nprose\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := UpdateSection(path, "x", "Heading X", "first\n"); err != nil {
		t.Fatal(err)
	}
	if err := UpdateSection(path, "y", "Heading Y", "other"); err != nil {
		t.Fatal(err)
	}
	if err := UpdateSection(path, "x", "Heading X", "second"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	got := string(b)
	want := "# Title\n\nprose\n\n## Heading X\n\n<!-- BEGIN GENERATED: x -->\nsecond\n<!-- END GENERATED: x -->\n\n## Heading Y\n\n<!-- BEGIN GENERATED: y -->\nother\n<!-- END GENERATED: y -->\n"
	if got != want {
		t.Fatalf("document:\n%s\nwant:\n%s", got, want)
	}
}

func TestReportRatios(t *testing.T) {
	mk := func(name string, kind Kind, cpu float64, rss int64) Result {
		return Result{Agent: Agent{Name: name, Kind: kind}, Version: "v", Replicas: 1, Window: 10 * time.Second,
			ActiveSeries: 1000, SamplesPerSec: 100, Samples: 1000, CPU: time.Second, CPUPerMillion: cpu,
			RSSSteady: rss, RSSPeak: rss, LagP50: 1, LagP99: 2}
	}
	res := []Result{
		mk("shoal", KindShoal, 2, 1000_000),
		mk("prom", KindPrometheus, 4, 4000_000),
		{Agent: Agent{Name: "vmagent", Kind: KindVMAgent}, Err: "missing: not built"},
	}
	rep := Report(res, Options{Load: loadgen.Config{Targets: 10, Series: 100}}, ThisMachine(), "make bench", time.Now())
	for _, want := range []string{
		"| shoal ÷ prom |",
		"| CPU s per 1M samples | 0.50 |",
		"| steady RSS per series | 0.25 |",
		"vmagent: missing: not built",
		"Command: `make bench`",
		"nproc",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
	st, _ := res[0].BytesPerSeries()
	if st != 1000 {
		t.Fatalf("bytes per series %v", st)
	}
	if s, _ := (Result{}).BytesPerSeries(); !math.IsNaN(s) {
		t.Fatal("bytes per series without series is not NaN")
	}
}

func TestModuleVersion(t *testing.T) {
	if got := moduleVersion(KindPrometheus, "v0.316.0"); got != "Prometheus 3.16.0 (module v0.316.0)" {
		t.Fatal(got)
	}
	if got := moduleVersion(KindPrometheus, "v0.305.2"); got != "Prometheus 3.5.2 (module v0.305.2)" {
		t.Fatal(got)
	}
}

// TestReportProfileWithoutCPUSamples: a CPU profile of an idle window holds
// no sample; the report still says the profile was taken, and over how long.
func TestReportProfileWithoutCPUSamples(t *testing.T) {
	r := Result{Agent: Agent{Name: "shoal", Kind: KindShoal}, Version: "v", Replicas: 1, ActiveSeries: 10,
		Profile: &Profiles{
			CPU:  ProfileSummary{SampleType: "cpu", Unit: "nanoseconds", Duration: 3 * time.Second},
			Heap: ProfileSummary{SampleType: "inuse_space", Unit: "bytes", Total: 1 << 20, Flat: []ProfileEntry{{"main.f", 1 << 20}}, Cum: []ProfileEntry{{"main.f", 1 << 20}}},
		}}
	rep := ReportProfile(r, Options{Load: loadgen.Config{Targets: 1, Series: 10}}, ThisMachine(), "go test", time.Now())
	for _, want := range []string{"**Heap in use: 1 MiB**", "**CPU: 0.0 s over 3 s** (0.000 cores)"} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}

func rusageCPU(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
