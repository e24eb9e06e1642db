// Command harness runs shoal's side-by-side benchmark against Prometheus in
// agent mode and vmagent, the ring and gossip simulations and the Go
// micro-benchmarks, and writes the results into docs/BENCHMARKS.md. It is
// normally started by bench/run.sh (make bench), which builds the binaries.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/shoal-dev/shoal/bench/harness"
	"github.com/shoal-dev/shoal/bench/sim"
)

func main() {
	var (
		opts                          harness.Options
		shoalBin, promBin, vmBin      string
		shoalMissing                  string
		agentsFlag                    []string
		doc, workDir, command         string
		microPkgs                     []string
		benchtime                     string
		ringSizes, gossipSizes        []int
		gossipRounds                  int
		skipSide, skipSims, skipMicro bool
		skipGossip                    bool
	)
	app := kingpin.New("harness", "Side-by-side benchmark of shoal, Prometheus agent mode and vmagent, plus ring and gossip simulations.")
	app.HelpFlag.Short('h')
	app.Flag("targets", "Number of load-generator targets.").Default("1000").IntVar(&opts.Load.Targets)
	app.Flag("series", "Series per small target.").Default("200").IntVar(&opts.Load.Series)
	app.Flag("skew", "Large targets expose this many times more series (0: uniform).").Default("20").Float64Var(&opts.Load.Skew)
	app.Flag("large-fraction", "Share of large targets.").Default("0.02").Float64Var(&opts.Load.LargeFraction)
	app.Flag("scrape-interval", "Scrape interval of every agent.").Default("5s").DurationVar(&opts.ScrapeInterval)
	app.Flag("warmup", "Warm-up per agent before measuring.").Default("30s").DurationVar(&opts.Warmup)
	app.Flag("duration", "Measurement window per agent.").Default("90s").DurationVar(&opts.Duration)
	app.Flag("agents", "Agents to measure, in order (repeat the flag or separate with commas): shoal, shoal-cluster, prometheus-agent, vmagent.").Default("shoal", "shoal-cluster", "prometheus-agent", "vmagent").StringsVar(&agentsFlag)
	app.Flag("shoal", "shoal binary.").StringVar(&shoalBin)
	app.Flag("shoal-missing", "Why the shoal binary is missing (e.g. its build error); reported instead of measuring shoal.").StringVar(&shoalMissing)
	app.Flag("prometheus", "Prometheus binary (run with --agent).").StringVar(&promBin)
	app.Flag("vmagent", "vmagent binary.").StringVar(&vmBin)
	app.Flag("work-dir", "Directory for configs, agent data and logs (default: a temporary directory).").StringVar(&workDir)
	app.Flag("doc", "Markdown file whose generated sections are replaced; empty prints to stdout.").Default("docs/BENCHMARKS.md").StringVar(&doc)
	app.Flag("command", "The command line to record in the report.").StringVar(&command)
	app.Flag("micro-bench", "Packages whose Go micro-benchmarks are run and pasted.").Default("./ring/", "./scrape/", "./wal/").StringsVar(&microPkgs)
	app.Flag("micro-benchtime", "go test -benchtime for the micro-benchmarks.").Default("300ms").StringVar(&benchtime)
	app.Flag("ring-sizes", "Ring sizes for the balance and movement and the placement simulations.").Default("3", "10", "30", "100").IntsVar(&ringSizes)
	app.Flag("gossip-sizes", "Cluster sizes for the gossip convergence simulation.").Default("10", "50").IntsVar(&gossipSizes)
	app.Flag("gossip-rounds", "Rounds per cluster size in the gossip simulation (median and worst are reported).").Default("3").IntVar(&gossipRounds)
	app.Flag("skip-side-by-side", "Skip the agent comparison.").BoolVar(&skipSide)
	app.Flag("skip-sims", "Skip the ring, placement and gossip simulations.").BoolVar(&skipSims)
	app.Flag("skip-gossip", "Skip only the gossip simulation (the ring and placement simulations still run).").BoolVar(&skipGossip)
	app.Flag("skip-micro", "Skip the Go micro-benchmarks.").BoolVar(&skipMicro)
	kingpin.MustParse(app.Parse(os.Args[1:]))

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if command == "" {
		command = "go run ./bench/cmd/harness " + strings.Join(os.Args[1:], " ")
	}
	opts.WorkDir, opts.Logger = workDir, logger
	machine := harness.ThisMachine()
	started := time.Now()
	write := func(name, heading, content string) {
		if doc == "" {
			fmt.Printf("## %s\n\n%s\n", heading, content)
			return
		}
		if err := harness.UpdateSection(doc, name, heading, content); err != nil {
			logger.Error("cannot update the report", "doc", doc, "err", err)
			os.Exit(1)
		}
		logger.Info("report section written", "doc", doc, "section", name)
	}
	status := 0

	if !skipSide {
		var agents []harness.Agent
		var names []string
		for _, f := range agentsFlag {
			names = append(names, strings.Split(f, ",")...)
		}
		for _, name := range names {
			a, err := agentFor(name, shoalBin, shoalMissing, promBin, vmBin)
			if err != nil {
				logger.Error("bad --agents", "err", err)
				os.Exit(2)
			}
			agents = append(agents, a)
		}
		if err := opts.Load.Validate(); err != nil {
			logger.Error("bad load flags", "err", err)
			os.Exit(2)
		}
		results, err := harness.Run(ctx, opts, agents)
		if err != nil {
			logger.Error("benchmark failed", "err", err)
			os.Exit(1)
		}
		for _, r := range results {
			if r.Err != "" {
				status = 1
			}
		}
		write("side-by-side", "Side by side", harness.Report(results, opts, machine, command, started))
	}

	if !skipSims && ctx.Err() == nil {
		rep := fmt.Sprintf("Measured %s on %s. Command: `%s`\n\n", started.UTC().Format("2006-01-02 15:04 MST"), machine, command)
		write("ring", "Ring balance and movement (simulation)", rep+sim.RingReport(ringSizes, 512, 10000))
		logger.Info("placement simulation", "sizes", ringSizes)
		write("placement", "Placement designs (simulation)", rep+sim.PlacementReport(ringSizes, 10000, sim.DefaultPlacementConfig()))
	}
	if !skipSims && !skipGossip && ctx.Err() == nil {
		rep := fmt.Sprintf("Measured %s on %s. Command: `%s`\n\n", started.UTC().Format("2006-01-02 15:04 MST"), machine, command)
		logger.Info("gossip simulation", "sizes", gossipSizes)
		g, err := sim.GossipReport(ctx, gossipSizes, gossipRounds, 2*time.Minute)
		if err != nil {
			status = 1
			logger.Error("gossip simulation failed", "err", err)
			g += "\n**Failed:** " + err.Error() + "\n"
		}
		write("gossip", "Gossip convergence (simulation)", rep+g)
	}

	if !skipMicro && ctx.Err() == nil {
		root := moduleRoot()
		logger.Info("micro-benchmarks", "packages", microPkgs, "benchtime", benchtime)
		cmdline, out, err := harness.MicroBench(ctx, root, microPkgs, benchtime)
		var s strings.Builder
		fmt.Fprintf(&s, "Measured %s on %s.\n\nCommand: `%s`\n\n", started.UTC().Format("2006-01-02 15:04 MST"), machine, cmdline)
		if err != nil {
			status = 1
			logger.Error("micro-benchmarks failed", "err", err)
			fmt.Fprintf(&s, "**Failed:** %v\n\n", err)
		}
		if out != "" {
			fmt.Fprintf(&s, "```\n%s\n```\n", out)
		}
		write("micro", "Go micro-benchmarks", s.String())
	}
	logger.Info("done", "took", time.Since(started).Round(time.Second))
	os.Exit(status)
}

func agentFor(name, shoalBin, shoalMissing, promBin, vmBin string) (harness.Agent, error) {
	missing := func(bin, why string) string {
		if why != "" {
			return why
		}
		if bin == "" {
			return "no binary given"
		}
		if _, err := os.Stat(bin); err != nil {
			return err.Error()
		}
		return ""
	}
	switch name {
	case "shoal":
		return harness.Agent{Name: "shoal", Kind: harness.KindShoal, Binary: shoalBin, Replicas: 1, Missing: missing(shoalBin, shoalMissing)}, nil
	case "shoal-cluster":
		return harness.Agent{Name: "shoal x3", Kind: harness.KindShoal, Binary: shoalBin, Replicas: 3, Missing: missing(shoalBin, shoalMissing)}, nil
	case "prometheus-agent":
		return harness.Agent{Name: "prometheus --agent", Kind: harness.KindPrometheus, Binary: promBin, Missing: missing(promBin, "")}, nil
	case "vmagent":
		return harness.Agent{Name: "vmagent", Kind: harness.KindVMAgent, Binary: vmBin, Missing: missing(vmBin, "")}, nil
	}
	return harness.Agent{}, fmt.Errorf("unknown agent %q (want shoal, shoal-cluster, prometheus-agent or vmagent)", name)
}

// moduleRoot is the directory of go.mod, for running go test.
func moduleRoot() string {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err == nil && strings.TrimSpace(string(out)) != "" && strings.TrimSpace(string(out)) != os.DevNull {
		return filepath.Dir(strings.TrimSpace(string(out)))
	}
	return "."
}
