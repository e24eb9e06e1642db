package harness

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/shoal-dev/shoal/bench/loadgen"
	"github.com/shoal-dev/shoal/internal/promtext"
)

func TestOrder(t *testing.T) {
	want := [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 2, 3, 0}, {0, 3, 2, 1}, {2, 3, 0, 1}}
	for r, w := range want {
		if got := Order(4, r); !slices.Equal(got, w) {
			t.Errorf("round %d: %v, want %v", r, got, w)
		}
	}
	// Every round is a permutation, and over the first two rounds every
	// pair of agents runs in both orders.
	for n := 1; n <= 5; n++ {
		before := map[[2]int]int{}
		for r := range 2 * n {
			o := Order(n, r)
			s := slices.Clone(o)
			slices.Sort(s)
			for i := range s {
				if s[i] != i {
					t.Fatalf("n=%d round %d: %v is not a permutation", n, r, o)
				}
			}
			if r < 2 {
				for i := range o {
					for j := i + 1; j < len(o); j++ {
						before[[2]int{o[i], o[j]}]++
					}
				}
			}
		}
		for a := range n {
			for b := range n {
				if a != b && before[[2]int{a, b}] != 1 {
					t.Errorf("n=%d: %d ran before %d in %d of the first two rounds, want 1", n, a, b, before[[2]int{a, b}])
				}
			}
		}
	}
	// Three rounds of four: no agent is first more than once.
	first := map[int]int{}
	for r := range 3 {
		first[Order(4, r)[0]]++
	}
	for a, n := range first {
		if n > 1 {
			t.Errorf("agent %d first in %d of 3 rounds", a, n)
		}
	}
	if len(Order(0, 3)) != 0 {
		t.Error("no agents, some order")
	}
}

func TestSpreadOf(t *testing.T) {
	s := SpreadOf([]float64{3, 1, 2})
	if s.Median != 2 || s.Min != 1 || s.Max != 3 || s.N != 3 {
		t.Errorf("odd: %+v", s)
	}
	s = SpreadOf([]float64{4, 1, math.NaN(), 2, 10, math.Inf(1)})
	if s.Median != 3 || s.Min != 1 || s.Max != 10 || s.N != 4 {
		t.Errorf("even with NaN and Inf: %+v", s)
	}
	if got := s.RelSpread(); got != 3 {
		t.Errorf("relative spread %v, want (10-1)/3", got)
	}
	s = SpreadOf(nil)
	if !math.IsNaN(s.Median) || s.N != 0 || !math.IsNaN(s.RelSpread()) {
		t.Errorf("empty: %+v", s)
	}
	if c := cell(SpreadOf([]float64{2.5, 1, 3}), fixed(2)); c != "2.50 (1.00–3.00)" {
		t.Errorf("cell %q", c)
	}
	if c := cell(SpreadOf([]float64{2}), fixed(1)); c != "2.0" {
		t.Errorf("one round cell %q", c)
	}
	if c := cell(SpreadOf(nil), fixed(1)); c != "–" {
		t.Errorf("no round cell %q", c)
	}
}

// res is a measured result with the figures the summaries use.
func res(a Agent, cpuPerM float64, rssMiB int64) Result {
	return Result{Agent: a, Version: "v", Replicas: max(a.Replicas, 1), Window: 10 * time.Second, Targets: 1000,
		ActiveSeries: 100_000, ExpectedPerSec: 20_000, SamplesPerSec: 20_000, Samples: 200_000, SeriesSeen: 100_000,
		CPU: time.Duration(cpuPerM * 0.2 * float64(time.Second)), CPUPerMillion: cpuPerM,
		RSSSteady: rssMiB << 20, RSSPeak: rssMiB << 20, LagP50: 0.1, LagP99: 0.5, FreshMax: 1,
		Mem: MemBreakdown{OK: true, RSS: rssMiB << 20, RSSAnon: rssMiB << 20, HeapInuse: rssMiB << 19, Goroutines: int(rssMiB)}}
}

var (
	shoal1 = Agent{Name: "shoal", Kind: KindShoal, Replicas: 1}
	shoal3 = Agent{Name: "shoal x3", Kind: KindShoal, Replicas: 3}
	prom   = Agent{Name: "prometheus --agent", Kind: KindPrometheus}
	vm     = Agent{Name: "vmagent", Kind: KindVMAgent}
)

func TestSummarize(t *testing.T) {
	failed := res(shoal1, 0, 0)
	failed.Err = "crashed"
	sums := Summarize([][]Result{
		{res(shoal1, 2, 300), failed, res(shoal1, 4, 100), res(shoal1, 3, 200)},
		{res(prom, 5, 400)},
	})
	if len(sums) != 2 {
		t.Fatalf("%d summaries", len(sums))
	}
	s := sums[0]
	if s.OK != 3 || len(s.Rounds) != 4 {
		t.Errorf("ok %d of %d rounds", s.OK, len(s.Rounds))
	}
	if s.CPUPerMillion != (Spread{Median: 3, Min: 2, Max: 4, N: 3}) {
		t.Errorf("CPU %+v", s.CPUPerMillion)
	}
	if s.RSSSteady.Median != 200<<20 || s.BytesPerSeries.Median != float64(200<<20)/100_000 {
		t.Errorf("RSS %+v, per series %+v", s.RSSSteady, s.BytesPerSeries)
	}
	// The breakdown comes from the round with the median RSS.
	if s.Mem.Goroutines != 200 {
		t.Errorf("breakdown from the round with %d MiB, want the median round (200 MiB)", s.Mem.Goroutines)
	}
	if math.Abs(s.CoresUsed.Median-0.06) > 1e-9 {
		t.Errorf("cores %v", s.CoresUsed)
	}
}

func TestRatios(t *testing.T) {
	sums := Summarize([][]Result{
		{res(shoal1, 2, 100)}, {res(shoal3, 2.2, 130)}, {res(prom, 4, 200)}, {res(vm, 1, 50)},
	})
	got := map[string]float64{}
	for _, r := range Ratios(sums) {
		got[r.Metric+": "+r.A+" ÷ "+r.B] = r.Value
	}
	for k, want := range map[string]float64{
		"CPU s per 1M samples: shoal ÷ prometheus --agent":  0.5,
		"CPU s per 1M samples: shoal ÷ vmagent":             2,
		"CPU s per 1M samples: shoal x3 ÷ shoal":            1.1,
		"steady RSS per series: shoal x3 ÷ shoal":           1.3,
		"steady RSS per series: shoal x3 ÷ vmagent":         2.6,
		"steady RSS per series: shoal ÷ prometheus --agent": 0.5,
	} {
		if math.Abs(got[k]-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, got[k], want)
		}
	}
	if _, ok := got["CPU s per 1M samples: prometheus --agent ÷ vmagent"]; ok {
		t.Error("peers compared with each other")
	}
	tab := RatioTable(sums)
	for _, want := range []string{"| metric | shoal ÷ prometheus --agent | shoal ÷ vmagent | shoal x3 ÷ prometheus --agent | shoal x3 ÷ vmagent | shoal x3 ÷ shoal |",
		"| CPU s per 1M samples | 0.50 | 2.00 | 0.55 | 2.20 | 1.10 |"} {
		if !strings.Contains(tab, want) {
			t.Errorf("ratio table lacks %q:\n%s", want, tab)
		}
	}
}

func TestEvaluateGoals(t *testing.T) {
	side := Summarize([][]Result{
		{res(shoal1, 3, 100)}, {res(shoal3, 3.6, 250)}, {res(prom, 4, 200)}, {res(vm, 3, 50)},
	})
	at := func(series int, shoalMiB, promMiB int64) GrowthPoint {
		s, p := res(shoal1, 1, shoalMiB), res(prom, 1, promMiB)
		s.ActiveSeries, p.ActiveSeries = series, series
		return GrowthPoint{Series: series, Targets: 1000, Interval: 10 * time.Second, Agents: Summarize([][]Result{{s}, {p}})}
	}
	idle := []Result{res(shoal1, 1, 70), res(prom, 1, 40)}
	idle[0].ActiveSeries, idle[0].Targets = 1000, 10

	goals := EvaluateGoals(GoalInputs{Side: side, Idle: idle, Growth: []GrowthPoint{at(100_000, 1, 1), at(1_000_000, 500, 1000)}})
	want := []struct {
		value   float64
		verdict string
		source  string
	}{
		{0.5, "met", "side by side (100000 series)"}, // the side-by-side run wins over the growth point at 100k
		{0.5, "met", "growth curve (1000000 series)"},
		{70, "missed by 9%", "idle point (10 targets"},
		{0.75, "met", "side by side"}, // equal to the limit is met
		{1, "met", "side by side"},
		{1.2, "missed by 9%", "side by side"},
		// (250 - 3×70) / (100 - 70): the cluster's RSS above three idle
		// footprints against one replica's above one.
		{4.0 / 3, "missed by 21%", "less idle footprints of 210 MiB (3 × one replica's) and 70 MiB"},
	}
	if len(goals) != len(want) {
		t.Fatalf("%d goals, want %d", len(goals), len(want))
	}
	for i, w := range want {
		g := goals[i]
		if math.Abs(g.Value-w.value) > 1e-9 || g.Verdict() != w.verdict || !strings.Contains(g.Source, w.source) {
			t.Errorf("goal %q: %v %q from %q, want %v %q from %q", g.What, g.Value, g.Verdict(), g.Source, w.value, w.verdict, w.source)
		}
	}

	// Without a side-by-side run, 100k comes from the growth curve; without
	// vmagent or the 1M point, those goals are not measured.
	goals = EvaluateGoals(GoalInputs{Growth: []GrowthPoint{at(100_000, 50, 100)}})
	if g := goals[0]; g.Value != 0.5 || !strings.Contains(g.Source, "growth curve (100000 series)") {
		t.Errorf("100k from growth: %+v", g)
	}
	for _, g := range goals[1:] {
		if g.Measured() || g.Verdict() != "not measured" || g.Source == "" {
			t.Errorf("%q measured without its part: %+v", g.What, g)
		}
	}
	goals = EvaluateGoals(GoalInputs{Side: Summarize([][]Result{{res(shoal1, 3, 100)}, {res(prom, 4, 200)}})})
	if g := goals[4]; g.Measured() || !strings.Contains(g.Source, "not measured") {
		t.Errorf("shoal ÷ vmagent without vmagent: %+v", g)
	}
	if g := EvaluateGoals(GoalInputs{Side: side})[6]; g.Measured() || !strings.Contains(g.Source, "no idle footprint") {
		t.Errorf("marginal cost without the idle point: %+v", g)
	}
	if g := EvaluateGoals(GoalInputs{Side: side, Idle: []Result{res(shoal1, 1, 120)}})[6]; g.Measured() {
		t.Errorf("marginal cost with an idle footprint above the loaded RSS: %+v", g)
	}
	// The idle point's own cluster, where it ran: (250 - 220) / (100 - 70).
	if g := EvaluateGoals(GoalInputs{Side: side, Idle: append(idle, res(shoal3, 1, 220))})[6]; math.Abs(g.Value-1) > 1e-9 || !strings.Contains(g.Source, "220 MiB (the cluster's)") {
		t.Errorf("marginal cost against the cluster's idle footprint: %+v", g)
	}
	rep := ReportGoals(EvaluateGoals(GoalInputs{Side: side, Idle: idle}), ThisMachine(), "make bench", time.Now())
	for _, w := range []string{"| idle RSS of one shoal replica (10 targets) | ≤ 64 MiB | 70 MiB | **missed by 9%** |", "| CPU s per 1M samples, shoal ÷ vmagent | ≤ 1.00 × | 1.00 × | **met** |", "not measured"} {
		if !strings.Contains(rep, w) {
			t.Errorf("goals report lacks %q:\n%s", w, rep)
		}
	}
}

func TestSummarizeProfile(t *testing.T) {
	fn := map[string]*profile.Function{}
	for i, n := range []string{"main", "parse", "alloc", "inlined", "rec"} {
		fn[n] = &profile.Function{ID: uint64(i + 1), Name: n}
	}
	loc := func(id uint64, names ...string) *profile.Location {
		l := &profile.Location{ID: id}
		for _, n := range names {
			l.Line = append(l.Line, profile.Line{Function: fn[n]})
		}
		return l
	}
	lMain, lParse, lAlloc := loc(1, "main"), loc(2, "parse"), loc(3, "alloc")
	lInl := loc(4, "inlined", "parse") // inlined into parse: innermost first
	lRec := loc(5, "rec")
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*profile.Sample{
			{Location: []*profile.Location{lAlloc, lParse, lMain}, Value: []int64{1, 50}},
			{Location: []*profile.Location{lInl, lMain}, Value: []int64{1, 30}},
			{Location: []*profile.Location{lRec, lRec, lRec, lMain}, Value: []int64{1, 15}},
			{Location: []*profile.Location{lMain}, Value: []int64{1, 5}},
			{Location: []*profile.Location{lParse, lMain}, Value: []int64{1, 0}},
		},
		DurationNanos: int64(2 * time.Second),
	}
	s, err := SummarizeProfile(p, "cpu", 3)
	if err != nil {
		t.Fatal(err)
	}
	if s.Total != 100 || s.Unit != "nanoseconds" || s.Duration != 2*time.Second {
		t.Errorf("total %d %s over %v", s.Total, s.Unit, s.Duration)
	}
	wantFlat := []ProfileEntry{{"alloc", 50}, {"inlined", 30}, {"rec", 15}}
	wantCum := []ProfileEntry{{"main", 100}, {"parse", 80}, {"alloc", 50}}
	if !slices.Equal(s.Flat, wantFlat) {
		t.Errorf("flat %v, want %v", s.Flat, wantFlat)
	}
	if !slices.Equal(s.Cum, wantCum) {
		t.Errorf("cum %v, want %v", s.Cum, wantCum)
	}
	all, _ := SummarizeProfile(p, "cpu", 10)
	for _, e := range all.Cum {
		if e.Func == "rec" && e.Value != 15 {
			t.Errorf("recursion counted %d times its value", e.Value/15)
		}
	}
	if _, err := SummarizeProfile(p, "inuse_space", 3); err == nil || !strings.Contains(err.Error(), "cpu") {
		t.Errorf("missing sample type: %v", err)
	}
	tab := profileTables(s, func(v int64) string { return strconvItoa(v) })
	if !strings.Contains(tab, "| 1 | `alloc` | 50 | 50.0% | `main` | 100 | 100.0% |") {
		t.Errorf("profile table:\n%s", tab)
	}
	if got := shortFunc("github.com/shoal-dev/shoal/wal.(*WAL).Append"); got != "wal.(*WAL).Append" {
		t.Error(got)
	}
	if got := shortFunc("github.com/prometheus/prometheus/tsdb/wlog.(*WL).Log"); got != "prometheus/tsdb/wlog.(*WL).Log" {
		t.Error(got)
	}
}

func strconvItoa(v int64) string { return num(float64(v), 0) }

func TestMemFromMetrics(t *testing.T) {
	page := `# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 1.048576e+08
# TYPE go_memstats_heap_idle_bytes gauge
go_memstats_heap_idle_bytes 9e+07
# TYPE go_memstats_heap_released_bytes gauge
go_memstats_heap_released_bytes 1e+07
# TYPE go_memstats_stack_inuse_bytes gauge
go_memstats_stack_inuse_bytes 2e+06
# TYPE go_memstats_sys_bytes gauge
go_memstats_sys_bytes 3e+08
# TYPE go_goroutines gauge
go_goroutines 42
`
	mfs, err := promtext.Parse(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	m, err := memFromMetrics(mfs)
	if err != nil {
		t.Fatal(err)
	}
	if m.HeapInuse != 100<<20 || m.HeapIdleUnreleased != 80e6 || m.Stacks != 2e6 || m.GoSys != 3e8 || m.Goroutines != 42 {
		t.Errorf("%+v", m)
	}
	m.RSSAnon = 200 << 20
	if got := m.OtherAnon(); got != 200<<20-100<<20-80e6-2e6 {
		t.Errorf("other %d", got)
	}
	delete(mfs, "go_memstats_stack_inuse_bytes")
	if _, err := memFromMetrics(mfs); err == nil || !strings.Contains(err.Error(), "go_memstats_stack_inuse_bytes") {
		t.Errorf("missing gauge: %v", err)
	}
}

func TestReportRounds(t *testing.T) {
	r2 := res(shoal1, 3, 120)
	r2.Round, r2.Position = 1, 1
	bad := res(prom, 0, 0)
	bad.Err = "exited early"
	bad.Round = 1
	sums := Summarize([][]Result{{res(shoal1, 2, 100), r2}, {res(prom, 4, 200), bad}})
	rep := ReportRounds(sums, SideSetup{Options: Options{Load: loadgen.Config{Targets: 1000, Series: 100}}, Rounds: 2, Machine: ThisMachine(), Command: "make bench", When: time.Now()})
	for _, want := range []string{
		"**2 rounds**",
		"round 1: shoal, prometheus --agent; round 2: prometheus --agent, shoal",
		"| shoal | v | 1 | 2 of 2 | 20000 | 2.50 (2.00–3.00) |",
		"| prometheus --agent | v | 1 | 1 of 2 | 20000 | 4.00 |",
		"| CPU s per 1M samples | 0.62 |",
		"| 2 | 2 | shoal | 0 s | 20000 | 3.00 | 120 MiB |",
		"| 2 | 1 | prometheus --agent | **failed**: exited early",
		"- prometheus --agent, round 2: exited early",
		"| shoal | 1 | 100 MiB | 100 MiB |",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("report lacks %q:\n%s", want, rep)
		}
	}
}

func TestReportGrowth(t *testing.T) {
	at := func(series int, shoalMiB, promMiB int64, promRate float64) GrowthPoint {
		s, p := res(shoal1, 1, shoalMiB), res(prom, 1, promMiB)
		s.ActiveSeries, p.ActiveSeries = series, series
		s.ExpectedPerSec, p.ExpectedPerSec = float64(series)/10, float64(series)/10
		s.SamplesPerSec, p.SamplesPerSec = float64(series)/10, promRate*float64(series)/10
		return GrowthPoint{Series: series, Targets: 1000, Interval: 10 * time.Second, Rounds: 1 + 2*(series/1_000_000), Agents: Summarize([][]Result{{s}, {p}})}
	}
	rep := ReportGrowth([]GrowthPoint{at(100_000, 100, 200, 1), at(300_000, 200, 500, 1), at(1_000_000, 600, 1500, 0.5)}, 30*time.Second, 30*time.Second, ThisMachine(), "make bench", time.Now())
	for _, want := range []string{
		"| agent | 100k series | 300k series | marginal 100k→300k | 1M series | marginal 300k→1M |",
		"1000 targets × 100 series, scrape interval 10s, 1 round(s)",
		"1000 targets × 1000 series, scrape interval 10s, 3 round(s)",
		// (200-100) MiB / 200k series = 524 B; (600-200) MiB / 700k = 599 B
		"| shoal | 100 MiB, 1049 B/series | 200 MiB, 699 B/series | 524 B | 600 MiB, 629 B/series | 599 B |",
		"1500 MiB, 1573 B/series ⚠ 50% delivered |",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("growth report lacks %q:\n%s", want, rep)
		}
	}
	if !math.IsNaN(Marginal(1, 2, 5, 5)) {
		t.Error("marginal over no added series")
	}
	for n, want := range map[int]string{100_000: "100k", 1_000_000: "1M", 1_500_000: "1.5M", 12345: "12345"} {
		if got := human(n); got != want {
			t.Errorf("human(%d) = %q, want %q", n, got, want)
		}
	}
	if got := group(1234567); got != "1,234,567" {
		t.Error(got)
	}
}

func TestHeadline(t *testing.T) {
	sums := Summarize([][]Result{{res(shoal1, 2, 100), res(shoal1, 3, 100), res(shoal1, 2.5, 100)}, {res(prom, 4, 200)}})
	idle := []Result{res(shoal1, 1, 70)}
	g := GrowthPoint{Series: 1_000_000, Agents: Summarize([][]Result{{res(shoal1, 1, 1000)}})}
	g.Agents[0].BytesPerSeries.Median = 700
	goals := EvaluateGoals(GoalInputs{Side: sums, Idle: idle})
	h := Headline(sums, SideSetup{Options: Options{ScrapeInterval: 5 * time.Second}, Rounds: 3, Machine: ThisMachine(), When: time.Now()}, idle, []GrowthPoint{g}, goals)
	for _, want := range []string{
		"medians of 3 rounds", "100,000 active series scraped every 5s",
		"| shoal, one replica | 2.50 | 1.05 KB | 70 MiB | 0.70 KB |",
		"| prometheus --agent | 4.00 | 2.10 KB | – | – |",
		"goals: 2 of 7 met in this run (3 measured)",
	} {
		if !strings.Contains(h, want) {
			t.Errorf("headline lacks %q:\n%s", want, h)
		}
	}
}

func TestRateOver(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int, n int64) countAt { return countAt{t0.Add(time.Duration(s) * time.Second), n} }
	if _, ok := rateOver([]countAt{at(0, 0)}, 10*time.Second); ok {
		t.Error("rate from one count")
	}
	if _, ok := rateOver([]countAt{at(0, 0), at(5, 100)}, 10*time.Second); ok {
		t.Error("rate over less than the span")
	}
	// The shortest stretch of at least the span ending at the newest count:
	// the slow start (0..10 s) does not count once 10 s of fast delivery
	// follow it.
	counts := []countAt{at(0, 0), at(10, 100), at(15, 600), at(20, 1100)}
	if r, ok := rateOver(counts, 10*time.Second); !ok || r != 100 {
		t.Errorf("rate %v %v, want 100/s over 10..20 s", r, ok)
	}
	if r, ok := rateOver(counts, 12*time.Second); !ok || r != 55 {
		t.Errorf("rate %v %v, want 1100/20 s", r, ok)
	}
}
