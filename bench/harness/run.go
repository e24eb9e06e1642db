// Package harness runs the side-by-side benchmark: the same synthetic load
// (package loadgen) is scraped by each agent in turn — shoal with one
// replica, a three-replica shoal cluster, Prometheus in agent mode, vmagent —
// all remote-writing to the same counting receiver (package sink). For each
// agent it measures CPU time per million samples delivered, resident memory
// (steady and peak) per active series, delivered samples per second and
// end-to-end lag, from /proc and from the receiver.
//
// Agents run one after another rather than concurrently, so that on a small
// machine no agent steals CPU from another while it is being measured.
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
}

// BytesPerSeries returns the steady and peak RSS per active series.
func (r Result) BytesPerSeries() (steady, peak float64) {
	if r.ActiveSeries == 0 {
		return math.NaN(), math.NaN()
	}
	return float64(r.RSSSteady) / float64(r.ActiveSeries), float64(r.RSSPeak) / float64(r.ActiveSeries)
}

// Run serves the load and measures each agent in turn. Agents that are
// missing or fail get a Result with Err set; Run itself fails only when the
// load cannot be served.
func Run(ctx context.Context, opts Options, agents []Agent) ([]Result, error) {
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
	defer lg.Close()
	fileSD := filepath.Join(opts.WorkDir, "targets.json")
	if err := lg.WriteFileSD(fileSD); err != nil {
		return nil, err
	}
	active := lg.Config().TotalSeries()
	opts.Logger.Info("load generator up", "targets", len(lg.Addrs()), "series", active, "interval", opts.ScrapeInterval)

	var out []Result
	for _, a := range agents {
		r := Result{Agent: a, Version: a.Version(), Replicas: max(a.Replicas, 1), ActiveSeries: active,
			ExpectedPerSec: float64(active) / opts.ScrapeInterval.Seconds()}
		if a.Missing != "" {
			r.Err = "missing: " + a.Missing
			out = append(out, r)
			continue
		}
		if err := ctx.Err(); err != nil {
			r.Err = err.Error()
			out = append(out, r)
			continue
		}
		opts.Logger.Info("measuring", "agent", a.Name, "version", r.Version, "warmup", opts.Warmup, "window", opts.Duration)
		if err := measure(ctx, opts, a, fileSD, &r); err != nil {
			r.Err = err.Error()
			opts.Logger.Error("agent failed", "agent", a.Name, "err", err)
		} else {
			opts.Logger.Info("measured", "agent", a.Name, "samples_per_sec", fmt.Sprintf("%.0f", r.SamplesPerSec),
				"cpu_s_per_million", fmt.Sprintf("%.2f", r.CPUPerMillion), "rss_steady_mib", r.RSSSteady>>20, "lag_p99_s", fmt.Sprintf("%.2f", r.LagP99))
		}
		out = append(out, r)
	}
	return out, nil
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

	// Warm up, then make sure something arrives before measuring.
	if err := wait(opts.Warmup); err != nil {
		return err
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
