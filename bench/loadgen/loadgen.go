// Package loadgen serves synthetic Prometheus scrape targets on loopback for
// benchmarks and demos.
//
// Each target gets its own HTTP listener (its own port), as real exporters
// do, so that agents open one connection per target and the per-target
// scrape machinery (connection reuse, offsets, timeouts) is exercised. A
// target exposes Config.Series sample lines in the Prometheus text format:
// counters and gauges whose values change on every scrape, and classic
// histograms (each one is 10 buckets, +Inf, _sum and _count: 13 series).
//
// Skew: with Config.Skew > 1, a fraction Config.LargeFraction of the targets
// (at least one) is "large" and exposes Skew times as many series as the
// others: a few very large targets among many small ones, the shape that
// makes naive sharding uneven.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// SeriesPerHistogram is how many series one classic histogram exposes.
const SeriesPerHistogram = len(histogramBounds) + 1 + 2

var histogramBounds = [...]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}

// Config describes the targets. Zero values take the documented defaults.
type Config struct {
	// Targets is the number of targets. Default 10.
	Targets int
	// Series is the number of series each (small) target exposes. Default 100.
	Series int
	// Skew is how many times more series a large target exposes than a
	// small one. 0 or 1 means every target is the same size.
	Skew float64
	// LargeFraction is the share of targets that are large when Skew > 1.
	// Default 0.02; at least one target is large.
	LargeFraction float64
	// HistogramFraction is the approximate share of a target's series that
	// belong to classic histograms. Default 0.2; negative means none.
	HistogramFraction float64
	// ListenHost is the address to listen on. Default 127.0.0.1. Only
	// loopback makes sense for benchmarks.
	ListenHost string
	// BasePort is the port of target 0; target i listens on BasePort+i.
	// 0 picks a free port for every target.
	BasePort int
}

func (c Config) withDefaults() Config {
	if c.Targets == 0 {
		c.Targets = 10
	}
	if c.Series == 0 {
		c.Series = 100
	}
	if c.LargeFraction == 0 {
		c.LargeFraction = 0.02
	}
	if c.HistogramFraction == 0 {
		c.HistogramFraction = 0.2
	}
	if c.ListenHost == "" {
		c.ListenHost = "127.0.0.1"
	}
	return c
}

// Validate reports a configuration that cannot be served.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Targets < 0:
		return fmt.Errorf("targets must be positive, got %d", c.Targets)
	case c.Series < 0:
		return fmt.Errorf("series must be positive, got %d", c.Series)
	case c.Skew < 0 || math.IsNaN(c.Skew) || math.IsInf(c.Skew, 0):
		return fmt.Errorf("skew must be >= 0, got %v", c.Skew)
	case c.LargeFraction < 0 || c.LargeFraction > 1:
		return fmt.Errorf("large fraction must be in [0,1], got %v", c.LargeFraction)
	case c.HistogramFraction > 1:
		return fmt.Errorf("histogram fraction must be <= 1, got %v", c.HistogramFraction)
	case c.BasePort < 0 || c.BasePort+c.Targets-1 > 65535:
		return fmt.Errorf("ports %d..%d out of range", c.BasePort, c.BasePort+c.Targets-1)
	}
	for _, s := range c.Sizes() {
		if s > 10_000_000 {
			return fmt.Errorf("a target of %d series is too large", s)
		}
	}
	return nil
}

// IsLarge tells whether target i is one of the large targets. Large targets
// are spread evenly over the index range so that port order says nothing.
func (c Config) IsLarge(i int) bool {
	c = c.withDefaults()
	l := c.numLarge()
	if l == 0 {
		return false
	}
	// Target i is large when the evenly spaced sequence floor(k*T/L)
	// contains it.
	k := (i*l + l - 1) / c.Targets // smallest k with k*T/L >= i
	return k < l && k*c.Targets/l == i
}

func (c Config) numLarge() int {
	if c.Skew <= 1 || c.Targets == 0 {
		return 0
	}
	return max(1, int(math.Round(float64(c.Targets)*c.LargeFraction)))
}

// Sizes returns the number of series each target exposes.
func (c Config) Sizes() []int {
	c = c.withDefaults()
	out := make([]int, c.Targets)
	large := int(math.Round(float64(c.Series) * c.Skew))
	for i := range out {
		out[i] = c.Series
		if c.IsLarge(i) {
			out[i] = large
		}
	}
	return out
}

// TotalSeries is the number of series all targets expose together.
func (c Config) TotalSeries() int {
	n := 0
	for _, s := range c.Sizes() {
		n += s
	}
	return n
}

// Server serves the targets.
type Server struct {
	cfg     Config
	targets []*target
	logger  *slog.Logger
	scrapes atomic.Int64
	wg      sync.WaitGroup
	srvs    []*http.Server
	cancel  context.CancelFunc
}

// Start listens for every target and serves them until ctx ends or Close is
// called. It fails, closing what it opened, if any port is taken.
func Start(ctx context.Context, cfg Config, logger *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{cfg: cfg, logger: logger, cancel: cancel}
	sizes := cfg.Sizes()
	for i, n := range sizes {
		port := 0
		if cfg.BasePort != 0 {
			port = cfg.BasePort + i
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(cfg.ListenHost, strconv.Itoa(port)))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("target %d: %w", i, err)
		}
		t := newTarget(i, n, cfg.HistogramFraction, &s.scrapes)
		t.addr = ln.Addr().String()
		s.targets = append(s.targets, t)
		srv := &http.Server{Handler: t, ReadHeaderTimeout: 10 * time.Second}
		s.srvs = append(s.srvs, srv)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				logger.Error("target stopped", "target", t.addr, "err", err)
			}
		}()
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		<-ctx.Done()
		s.shutdown()
	}()
	return s, nil
}

func (s *Server) shutdown() {
	for _, srv := range s.srvs {
		_ = srv.Close()
	}
}

// Close stops every listener and waits for the serving goroutines.
func (s *Server) Close() {
	s.cancel()
	s.shutdown()
	s.wg.Wait()
}

// Wait blocks until the context given to Start has ended (or Close was
// called) and every listener has stopped.
func (s *Server) Wait() { s.wg.Wait() }

// Addrs returns the host:port of every target, in target order.
func (s *Server) Addrs() []string {
	out := make([]string, len(s.targets))
	for i, t := range s.targets {
		out[i] = t.addr
	}
	return out
}

// Config returns the configuration with defaults applied.
func (s *Server) Config() Config { return s.cfg }

// Scrapes returns how many scrapes all targets have answered.
func (s *Server) Scrapes() int64 { return s.scrapes.Load() }

// TargetScrapes is what one target has answered: how many scrapes and
// when the latest one came.
type TargetScrapes struct {
	Count int64
	Last  time.Time // zero before the first scrape
}

// PerTarget returns every target's scrape count and latest scrape, in
// target order: a harness tells a target scraped twice per interval (two
// scrapers) or not at all from these, whatever the agents report.
func (s *Server) PerTarget() []TargetScrapes {
	out := make([]TargetScrapes, len(s.targets))
	for i, t := range s.targets {
		out[i].Count = t.scrapes.Load()
		if ns := t.last.Load(); ns != 0 {
			out[i].Last = time.Unix(0, ns)
		}
	}
	return out
}

// FileSDGroup is one entry of a Prometheus file_sd JSON file.
type FileSDGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// FileSD returns the file_sd groups listing every target, one group per
// target with a "size" label telling small from large.
func (s *Server) FileSD() []FileSDGroup {
	out := make([]FileSDGroup, len(s.targets))
	for i, t := range s.targets {
		size := "small"
		if s.cfg.IsLarge(i) {
			size = "large"
		}
		out[i] = FileSDGroup{Targets: []string{t.addr}, Labels: map[string]string{"size": size}}
	}
	return out
}

// WriteFileSD writes FileSD to path atomically, so a file_sd watcher never
// reads half a file.
func (s *Server) WriteFileSD(path string) error {
	b, err := json.MarshalIndent(s.FileSD(), "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".file-sd-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
