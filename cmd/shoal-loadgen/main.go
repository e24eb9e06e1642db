// Command shoal-loadgen serves synthetic Prometheus scrape targets on
// loopback, one HTTP listener (port) per target, for benchmarks and demos.
// With --file-sd-out it writes a Prometheus file_sd JSON file listing the
// targets, so that any agent (shoal, Prometheus, vmagent) picks them up.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/alecthomas/kingpin/v2"

	"github.com/shoal-dev/shoal/bench/loadgen"
)

func main() {
	var cfg loadgen.Config
	var fileSD string
	app := kingpin.New("shoal-loadgen", "Serves synthetic Prometheus scrape targets on loopback: N targets x M series, one port per target.")
	app.HelpFlag.Short('h')
	app.Flag("targets", "Number of targets.").Default("30").IntVar(&cfg.Targets)
	app.Flag("series", "Series per (small) target: counters, gauges and classic histograms, all changing on every scrape.").Default("100").IntVar(&cfg.Series)
	app.Flag("skew", "A large target exposes this many times the series of a small one; 0 or 1 means all targets are equal.").Default("0").Float64Var(&cfg.Skew)
	app.Flag("large-fraction", "Share of targets that are large when --skew > 1 (at least one).").Default("0.02").Float64Var(&cfg.LargeFraction)
	app.Flag("histogram-fraction", "Approximate share of each target's series in classic histograms (13 series each); negative for none.").Default("0.2").Float64Var(&cfg.HistogramFraction)
	app.Flag("listen-host", "Address the targets listen on.").Default("127.0.0.1").StringVar(&cfg.ListenHost)
	app.Flag("base-port", "Port of the first target; target i listens on base-port+i. 0 picks free ports (use --file-sd-out to find them).").Default("0").IntVar(&cfg.BasePort)
	app.Flag("file-sd-out", "Write a Prometheus file_sd JSON file listing the targets to this path.").StringVar(&fileSD)
	kingpin.MustParse(app.Parse(os.Args[1:]))

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := cfg.Validate(); err != nil {
		logger.Error("bad flags", "err", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	s, err := loadgen.Start(ctx, cfg, logger)
	if err != nil {
		logger.Error("cannot start targets", "err", err)
		os.Exit(1)
	}
	if fileSD != "" {
		if err := s.WriteFileSD(fileSD); err != nil {
			logger.Error("cannot write file_sd file", "path", fileSD, "err", err)
			s.Close()
			os.Exit(1)
		}
	}
	addrs := s.Addrs()
	logger.Info("serving targets", "targets", len(addrs), "series_total", cfg.TotalSeries(),
		"first", addrs[0], "last", addrs[len(addrs)-1], "file_sd", fileSD)
	fmt.Fprintf(os.Stderr, "%d targets, %d series in total; metrics at http://%s/metrics ...\n", len(addrs), cfg.TotalSeries(), addrs[0])
	s.Wait()
	logger.Info("stopped")
}
