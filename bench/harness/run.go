// Package harness runs the side-by-side benchmark: the same synthetic load
// (package loadgen) is scraped by each agent in turn — shoal with one
// replica, a three-replica shoal cluster, Prometheus in agent mode, vmagent —
// all remote-writing to the same counting receiver (package sink). For each
// agent it measures CPU time per million samples delivered, resident memory
// (steady and peak) per active series and where it goes (MemBreakdown),
// delivered samples per second and end-to-end lag, from /proc, from the
// receiver and from the agent's /metrics; on request it profiles the agent
// through its /debug/pprof (Profiles).
//
// Agents run one after another rather than concurrently, so that on a small
// machine no agent steals CPU from another while it is being measured.
// Bench.Rounds repeats that in rounds of alternating order (Order) and
// Summarize folds the rounds into medians and ranges (Spread), which the
// ratio table (Ratios) and the performance goals (EvaluateGoals) are judged on.
package harness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/shoal-dev/shoal/bench/loadgen"
	"github.com/shoal-dev/shoal/bench/sink"
)

// Options configure a benchmark run. Zero values take the defaults noted.
type Options struct {
	// Load is the synthetic load every agent scrapes.
	Load loadgen.Config
	// ScrapeInterval for every agent (timeout equal to it). Default 10s.
	ScrapeInterval time.Duration
	// Warmup is how long an agent runs before measuring starts; the window
	// also waits (up to max(Warmup, 30s) more) for the first delivered
	// sample.
	// Default 3 scrape intervals.
	Warmup time.Duration
	// Duration of the measurement window. Default 60s.
	Duration time.Duration
	// SampleEvery is how often RSS and freshness are sampled. Default 1s.
	SampleEvery time.Duration
	// WorkDir holds configs, agent data directories and logs. Default: a
	// new temporary directory.
	WorkDir string
	// Logger for progress. Default: discard.
	Logger *slog.Logger
	// Settle, when set, extends the warm-up by up to this long until the
	// receiver got at least SettledShare of the expected samples over the
	// last two scrape intervals. Default 0: no check.
	Settle time.Duration
	// Profile takes a CPU profile over the measurement window and a heap
	// profile at its end from the agent's first process (its
	// /debug/pprof), and keeps them in the agent's work directory.
	Profile bool
}

func (o Options) withDefaults() Options {
	if o.ScrapeInterval == 0 {
		o.ScrapeInterval = 10 * time.Second
	}
	if o.Warmup == 0 {
		o.Warmup = 3 * o.ScrapeInterval
	}
	if o.Duration == 0 {
		o.Duration = 60 * time.Second
	}
	if o.SampleEvery == 0 {
		o.SampleEvery = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Result is what one agent did in its measurement window.
type Result struct {
	Agent    Agent
	Version  string
	Replicas int
	// Err is set when the agent could not be measured (missing, crashed,
	// delivered nothing); the other fields are then partial.
	Err string

	Window        time.Duration
	Targets       int     // targets of the load
	ActiveSeries  int     // series the targets expose (same for every agent)
	SeriesSeen    int     // distinct series the receiver got in the window
	Samples       int64   // samples delivered in the window
	SamplesPerSec float64 // delivered, counted at the receiver
	// ExpectedPerSec is ActiveSeries / scrape interval: what a complete
	// agent delivers, before its own per-target series (up, scrape_*).
	ExpectedPerSec float64
	CPU            time.Duration // user+system time of all replicas in the window
	CPUPerMillion  float64       // CPU seconds per million samples delivered
	RSSSteady      int64         // median of summed VmRSS samples in the window
	RSSPeak        int64         // summed VmHWM at the end of the window
	// LagP50 and LagP99: per request, receive time minus the newest sample
	// in it (seconds).
	LagP50, LagP99 float64
	// FreshMean and FreshMax: sampled every SampleEvery, now minus the
	// newest sample timestamp the receiver has seen (seconds).
	FreshMean, FreshMax float64
	Rejected            int64 // requests the receiver refused
	// HarnessCPU is what the load generator and the receiver (this
	// process) used in the window, for context.
	HarnessCPU time.Duration
	// WarmedUp is how long the agent ran before its window started: the
	// warm-up, plus waiting for the first sample and for Options.Settle.
	WarmedUp time.Duration
	// Round is the round (0-based) of a multi-round run, Position the
	// agent's place (0-based) in that round's order.
	Round, Position int
	// Mem is where the agent's memory went at the end of the window,
	// summed over its processes (Mem.OK false when it could not be read).
	Mem MemBreakdown
	// Profile holds the profiles taken when Options.Profile was set.
	Profile *Profiles
}

// BytesPerSeries returns the steady and peak RSS per active series.
func (r Result) BytesPerSeries() (steady, peak float64) {
	if r.ActiveSeries == 0 {
		return math.NaN(), math.NaN()
	}
	return float64(r.RSSSteady) / float64(r.ActiveSeries), float64(r.RSSPeak) / float64(r.ActiveSeries)
}

// SettledShare is the share of the expected samples per second an agent
// must deliver before its warm-up ends (see Options.Settle).
const SettledShare = 0.9

// countAt is what the receiver had counted at one moment.
type countAt struct {
	t time.Time
	n int64
}

// rateOver returns the samples per second over the last span of the
// counts (oldest first), and false while they cover less than span.
func rateOver(counts []countAt, span time.Duration) (float64, bool) {
	if len(counts) < 2 {
		return 0, false
	}
	last := counts[len(counts)-1]
	for i := len(counts) - 2; i >= 0; i-- {
		if d := last.t.Sub(counts[i].t); d >= span {
			return float64(last.n-counts[i].n) / d.Seconds(), true
		}
	}
	return 0, false
}

// CoresUsed is the agent's CPU time over the window's length.
func (r Result) CoresUsed() float64 {
	if r.Window <= 0 {
		return math.NaN()
	}
	return r.CPU.Seconds() / r.Window.Seconds()
}

// Bench serves one synthetic load; agents are measured against it one at a
// time with Measure.
type Bench struct {
	opts   Options
	lg     *loadgen.Server
	fileSD string
	active int
}

// Start serves the load of opts and writes its file_sd file into
// opts.WorkDir.
func Start(ctx context.Context, opts Options) (*Bench, error) {
	opts = opts.withDefaults()
	if opts.WorkDir == "" {
		d, err := os.MkdirTemp("", "shoal-bench-")
		if err != nil {
			return nil, err
		}
		opts.WorkDir = d
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	lg, err := loadgen.Start(ctx, opts.Load, opts.Logger)
	if err != nil {
		return nil, fmt.Errorf("load generator: %w", err)
	}
	b := &Bench{opts: opts, lg: lg, fileSD: filepath.Join(opts.WorkDir, "targets.json"), active: lg.Config().TotalSeries()}
	if err := lg.WriteFileSD(b.fileSD); err != nil {
		lg.Close()
		return nil, err
	}
	opts.Logger.Info("load generator up", "targets", len(lg.Addrs()), "series", b.active, "interval", opts.ScrapeInterval)
	return b, nil
}

// ActiveSeries is the number of series the targets expose.
func (b *Bench) ActiveSeries() int { return b.active }

// Close stops the load generator.
func (b *Bench) Close() { b.lg.Close() }

// Measure runs agent a against the load and measures it. A missing or
// failing agent gives a Result with Err set.
func (b *Bench) Measure(ctx context.Context, a Agent) Result {
	opts := b.opts
	r := Result{Agent: a, Version: a.Version(), Replicas: max(a.Replicas, 1), Targets: len(b.lg.Addrs()), ActiveSeries: b.active,
		ExpectedPerSec: float64(b.active) / opts.ScrapeInterval.Seconds()}
	if a.Missing != "" {
		r.Err = "missing: " + a.Missing
		return r
	}
	if err := ctx.Err(); err != nil {
		r.Err = err.Error()
		return r
	}
	opts.Logger.Info("measuring", "agent", a.Name, "series", b.active, "version", r.Version, "warmup", opts.Warmup, "window", opts.Duration)
	if err := measure(ctx, opts, a, b.fileSD, &r); err != nil {
		r.Err = err.Error()
		opts.Logger.Error("agent failed", "agent", a.Name, "err", err)
	} else {
		opts.Logger.Info("measured", "agent", a.Name, "samples_per_sec", fmt.Sprintf("%.0f", r.SamplesPerSec),
			"cpu_s_per_million", fmt.Sprintf("%.2f", r.CPUPerMillion), "rss_steady_mib", r.RSSSteady>>20, "lag_p99_s", fmt.Sprintf("%.2f", r.LagP99))
	}
	return r
}

// Run serves the load and measures each agent in turn, once. Agents that
// are missing or fail get a Result with Err set; Run itself fails only when
// the load cannot be served.
func Run(ctx context.Context, opts Options, agents []Agent) ([]Result, error) {
	b, err := Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	var out []Result
	for _, a := range agents {
		out = append(out, b.Measure(ctx, a))
	}
	return out, nil
}

// Rounds measures every agent rounds times, in the order Order gives for
// each round, and returns each agent's results in agent order (out[i][r] is
// agent i in round r). progress, when not nil, is called before each
// measurement with the round (0-based) and the step (1-based) of all.
func (b *Bench) Rounds(ctx context.Context, agents []Agent, rounds int, progress func(round, step, steps int, a Agent)) [][]Result {
	out := make([][]Result, len(agents))
	steps := rounds * len(agents)
	for r := range rounds {
		for k, i := range Order(len(agents), r) {
			if progress != nil {
				progress(r, r*len(agents)+k+1, steps, agents[i])
			}
			res := b.Measure(ctx, agents[i])
			res.Round, res.Position = r, k
			out[i] = append(out[i], res)
		}
	}
	return out
}

// Profile measures agent a once with a window of the given length, taking
// a CPU profile over the window and a heap profile at its end (see
// Options.Profile).
func (b *Bench) Profile(ctx context.Context, a Agent, window time.Duration) Result {
	c := *b
	c.opts.Profile = true
	c.opts.Duration = window
	return c.Measure(ctx, a)
}

func measure(ctx context.Context, opts Options, a Agent, fileSD string, r *Result) error {
	dir := filepath.Join(opts.WorkDir, a.Name)
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}

	sk := sink.New(sink.Options{TrackSeries: true})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: sk, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	url := "http://" + ln.Addr().String() + "/api/v1/write"

	started := time.Now()
	promCfg, scrapeOnly, err := writeConfigs(dir, fileSD, url, opts.ScrapeInterval)
	if err != nil {
		return err
	}
	procs, err := launch(a, runEnv{dir: dir, promConfig: promCfg, scrapeOnly: scrapeOnly, remoteWriteURL: url})
	if err != nil {
		return err
	}
	defer func() {
		for _, p := range procs {
			p.stop(20 * time.Second)
		}
	}()
	dead := func() error {
		for _, p := range procs {
			if p.exited() {
				return fmt.Errorf("%s exited early (%v); last log lines:\n%s", p.name, p.err, p.logTail())
			}
		}
		return nil
	}
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return dead()
		}
	}

	// Warm up, recording what arrives, then make sure something arrives
	// before measuring.
	var arrived []countAt
	record := func() { arrived = append(arrived, countAt{time.Now(), sk.Snapshot().Samples}) }
	for end := time.Now().Add(opts.Warmup); time.Now().Before(end); {
		record()
		if err := wait(min(time.Second, time.Until(end))); err != nil {
			return err
		}
	}
	extra := max(opts.Warmup, 30*time.Second)
	for deadline := time.Now().Add(extra); sk.Snapshot().Samples == 0; {
		if time.Now().After(deadline) {
			return fmt.Errorf("no sample delivered after %v (receiver: %q); last log lines of %s:\n%s",
				opts.Warmup+extra, sk.Snapshot().LastErr, procs[0].name, procs[0].logTail())
		}
		if err := wait(200 * time.Millisecond); err != nil {
			return err
		}
	}
	// Settle: an agent still working through its first scrapes of many
	// series delivers less than the targets produce; its memory is not yet
	// steady. Wait until the last two intervals delivered enough, or give up
	// after Settle and measure anyway (the rate in the report shows it).
	if opts.Settle > 0 {
		span := 2 * opts.ScrapeInterval
		for deadline := time.Now().Add(opts.Settle); ; {
			record()
			rate, ok := rateOver(arrived, span)
			if ok && rate >= SettledShare*r.ExpectedPerSec {
				break
			}
			if time.Now().After(deadline) {
				opts.Logger.Warn("not settled, measuring anyway", "agent", a.Name, "samples_per_sec", fmt.Sprintf("%.0f", rate), "expected", fmt.Sprintf("%.0f", r.ExpectedPerSec))
				break
			}
			if err := wait(time.Second); err != nil {
				return err
			}
		}
	}
	r.WarmedUp = time.Since(started)

	cpu := func() (time.Duration, error) {
		var sum time.Duration
		for _, p := range procs {
			c, err := ProcCPU(p.pid())
			if err != nil {
				return 0, err
			}
			sum += c
		}
		return sum, nil
	}
	mem := func() (rss, hwm int64, err error) {
		for _, p := range procs {
			r, h, err := ProcMem(p.pid())
			if err != nil {
				return 0, 0, err
			}
			rss += r
			hwm += h
		}
		return rss, hwm, nil
	}

	sk.ResetSeries()
	sk.TakeLags()
	var cpuProf chan profileResult
	if opts.Profile {
		// Buffered and bound to this measurement: an early return cancels
		// the fetch and the goroutine ends without a reader.
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cpuProf = make(chan profileResult, 1)
		go func() {
			secs := max(int(opts.Duration.Seconds()), 1)
			p, path, err := fetchProfile(pctx, procs[0], fmt.Sprintf("/debug/pprof/profile?seconds=%d", secs), filepath.Join(dir, "cpu.pprof"), time.Duration(secs)*time.Second+time.Minute)
			cpuProf <- profileResult{p, path, err}
		}()
	}
	s0 := sk.Snapshot()
	cpu0, err := cpu()
	if err != nil {
		return err
	}
	self0, _ := ProcCPU(os.Getpid())
	start := time.Now()
	var rssSamples, fresh []float64
	for time.Since(start) < opts.Duration {
		if err := wait(min(opts.SampleEvery, opts.Duration-time.Since(start))); err != nil {
			return err
		}
		rss, _, err := mem()
		if err != nil {
			return err
		}
		rssSamples = append(rssSamples, float64(rss))
		if f, ok := sk.Freshness(); ok {
			fresh = append(fresh, f.Seconds())
		}
	}
	cpu1, err := cpu()
	if err != nil {
		return err
	}
	_, hwm, err := mem()
	if err != nil {
		return err
	}
	self1, _ := ProcCPU(os.Getpid())
	s1 := sk.Snapshot()
	r.Mem = readMem(ctx, procs)
	if opts.Profile {
		r.Profile = collectProfiles(ctx, procs[0], dir, cpuProf)
	}
	r.Window = s1.Time.Sub(s0.Time)
	r.Samples = s1.Samples - s0.Samples
	r.SeriesSeen = s1.Series
	r.SamplesPerSec = float64(r.Samples) / r.Window.Seconds()
	r.CPU = cpu1 - cpu0
	r.HarnessCPU = self1 - self0
	if r.Samples > 0 {
		r.CPUPerMillion = r.CPU.Seconds() / (float64(r.Samples) / 1e6)
	}
	r.RSSSteady = int64(sink.Percentile(rssSamples, 50))
	r.RSSPeak = hwm
	lags := sk.TakeLags()
	r.LagP50, r.LagP99 = sink.Percentile(lags, 50), sink.Percentile(lags, 99)
	if len(fresh) > 0 {
		sum := 0.0
		for _, f := range fresh {
			sum += f
		}
		r.FreshMean, r.FreshMax = sum/float64(len(fresh)), slices.Max(fresh)
	}
	r.Rejected = s1.Rejected
	if r.Samples == 0 {
		return errors.New("no sample delivered during the measurement window")
	}
	return nil
}
