package scale

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestTenReplicasHoldEveryHandOffGuarantee is `make scale` at 10 replicas:
// a cold start, a rolling restart, a scale-out and back and a crash of two
// replicas, with real processes, targets and receiver. What it asserts
// does not depend on the machine's load: every target is scraped after
// each disruption, the receiver refuses nothing and no replica fails a
// sample through the graceful phases, no target is scraped by two
// replicas at once and the report renders. The crash is held to coverage
// only: a SIGKILLed replica's unsent samples wait in its WAL, and when it
// comes back after their targets' new owners went ahead the receiver
// refuses them as out of order (docs/operations.md, Hand-off); no design
// without a shared log avoids that. Timings are logged, not asserted.
func TestTenReplicasHoldEveryHandOffGuarantee(t *testing.T) {
	if testing.Short() {
		t.Skip("builds shoal and runs 10 processes")
	}
	bin := buildShoal(t)
	dir := t.TempDir()
	res, err := Run(t.Context(), Options{
		Shoal: bin, Replicas: 10, Extra: 2, Kill: 2, Targets: 200, Series: 5,
		Interval: 2 * time.Second, Idle: 4 * time.Second, WorkDir: dir,
		Subnet: "127.0.22", Logf: t.Logf,
	})
	if err != nil {
		dumpLogs(t, dir)
		t.Fatal(err)
	}
	for _, p := range []Phase{res.Cold, res.Rolling, res.ScaleOut, res.ScaleIn, res.Crash} {
		if p.Err != "" {
			t.Errorf("%s: %s", p.Name, p.Err)
		}
		if p.Name == res.Crash.Name {
			t.Logf("%s: receiver refused %+v, replicas failed %v samples (the killed replicas' WAL, not asserted)", p.Name, p.Refusals, p.Failed)
		} else if p.Refusals.Total() != 0 || p.Failed != 0 {
			t.Errorf("%s: receiver refused %+v, replicas failed %v samples", p.Name, p.Refusals, p.Failed)
		}
		if p.Gaps.Silent != 0 {
			t.Errorf("%s: %d targets delivered nothing", p.Name, p.Gaps.Silent)
		}
	}
	if res.Cold.Doubles != 0 {
		t.Errorf("cold start: %d targets scraped by two replicas", res.Cold.Doubles)
	}
	if res.Crash.Recovery <= 0 {
		t.Errorf("crash: coverage never came back")
	}
	if res.Idle.Replicas != 10 || res.Idle.RSSMean <= 0 || res.Idle.GoroutinesMean <= 0 {
		t.Errorf("idle cost not measured: %+v", res.Idle)
	}
	for _, v := range res.Views {
		if v.Err != "" || v.Bytes == 0 {
			t.Errorf("view %s: %d bytes, %s", v.Name, v.Bytes, v.Err)
		}
	}
	md := Report(res, nil, "go test")
	for _, want := range []string{"rolling restart", "| 10 replicas"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if t.Failed() {
		dumpLogs(t, dir)
	}
}

func buildShoal(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "shoal")
	build := exec.Command("go", "build", "-o", bin, "./cmd/shoal")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/shoal: %v\n%s", err, out)
	}
	return bin
}

func dumpLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "shoal-*", "shoal.log"))
	for _, l := range logs[:min(len(logs), 3)] {
		b, _ := os.ReadFile(l)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("%s:\n%s", l, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
}
