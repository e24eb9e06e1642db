// Command harness runs shoal's side-by-side benchmark against Prometheus in
// agent mode and vmagent (several rounds in alternating order), the idle
// point, the memory-growth curve, profiles of shoal, the ring and gossip
// simulations and the Go micro-benchmarks, and writes the results into
// docs/BENCHMARKS.md (and the headline into README.md). It is normally
// started by bench/run.sh (make bench), which builds the binaries.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/shoal-dev/shoal/bench/harness"
	"github.com/shoal-dev/shoal/bench/loadgen"
	"github.com/shoal-dev/shoal/bench/sim"
)

// Rough costs of the parts that are not warm-up and window, for the plan
// printed at the start: starting and stopping an agent, and the simulations
// and micro-benchmarks (measured on the 2-core machine).
const (
	perAgentOverhead       = 8 * time.Second
	perGrowthAgentOverhead = 15 * time.Second
	simsCost               = 3 * time.Minute
	microCost              = 2 * time.Minute
)

func main() {
	var (
		opts                          harness.Options
		rounds                        int
		shoalBin, promBin, vmBin      string
		shoalMissing                  string
		agentsFlag, growthAgentsFlag  []string
		doc, readme, workDir, command string
		microPkgs                     []string
		benchtime                     string
		ringSizes, gossipSizes        []int
		gossipRounds                  int
		skipSide, skipSims, skipMicro bool
		skipGossip, skipIdle          bool
		skipGrowth, skipProfile       bool
		idleTargets, idleSeries       int
		idleWarmup, idleDuration      time.Duration
		growthSeries                  []int
		growthSeriesFlag              []string
		growthTargets, growthRounds   int
		growthLargestRounds           int
		growthInterval                time.Duration
		growthWarmup, growthDuration  time.Duration
		growthSettle                  time.Duration
		profileDuration               time.Duration
	)
	app := kingpin.New("harness", "Side-by-side benchmark of shoal, Prometheus agent mode and vmagent (rounds, idle point, growth curve, profiles), plus ring and gossip simulations.")
	app.HelpFlag.Short('h')
	app.Flag("targets", "Side by side: number of load-generator targets.").Default("1000").IntVar(&opts.Load.Targets)
	app.Flag("series", "Side by side: series per (small) target.").Default("100").IntVar(&opts.Load.Series)
	app.Flag("skew", "Side by side: large targets expose this many times more series (0: uniform).").Default("0").Float64Var(&opts.Load.Skew)
	app.Flag("large-fraction", "Side by side: share of large targets.").Default("0.02").Float64Var(&opts.Load.LargeFraction)
	app.Flag("scrape-interval", "Side by side, idle point and profile: scrape interval of every agent.").Default("5s").DurationVar(&opts.ScrapeInterval)
	app.Flag("warmup", "Side by side and profile: warm-up per agent before measuring.").Default("20s").DurationVar(&opts.Warmup)
	app.Flag("duration", "Side by side: measurement window per agent and round.").Default("60s").DurationVar(&opts.Duration)
	app.Flag("settle", "Side by side and profile: after the warm-up, wait up to this long more until an agent delivers 90% of the expected samples/s (0: no check).").Default("30s").DurationVar(&opts.Settle)
	app.Flag("rounds", "Side by side: rounds per agent (order alternates between rounds).").Default("3").IntVar(&rounds)
	app.Flag("agents", "Agents to measure side by side and at the idle point (repeat the flag or separate with commas): shoal, shoal-cluster, prometheus-agent, vmagent.").Default("shoal", "shoal-cluster", "prometheus-agent", "vmagent").StringsVar(&agentsFlag)
	app.Flag("idle-targets", "Idle point: targets.").Default("10").IntVar(&idleTargets)
	app.Flag("idle-series", "Idle point: series per target.").Default("100").IntVar(&idleSeries)
	app.Flag("idle-warmup", "Idle point: warm-up.").Default("15s").DurationVar(&idleWarmup)
	app.Flag("idle-duration", "Idle point: window.").Default("15s").DurationVar(&idleDuration)
	app.Flag("growth-series", "Growth curve: active series at each point (repeat or separate with commas).").Default("100000", "300000", "1000000").StringsVar(&growthSeriesFlag)
	app.Flag("growth-targets", "Growth curve: targets at every point (series per target = series / targets).").Default("1000").IntVar(&growthTargets)
	app.Flag("growth-interval", "Growth curve: scrape interval at every point (longer than the side by side's so that 1M series fit 2 cores).").Default("10s").DurationVar(&growthInterval)
	app.Flag("growth-warmup", "Growth curve: warm-up per agent and point.").Default("30s").DurationVar(&growthWarmup)
	app.Flag("growth-duration", "Growth curve: window per agent and point.").Default("30s").DurationVar(&growthDuration)
	app.Flag("growth-settle", "Growth curve: after the warm-up, wait up to this long more until an agent delivers 90% of the expected samples/s (0: no check).").Default("60s").DurationVar(&growthSettle)
	app.Flag("growth-rounds", "Growth curve: rounds per agent and point.").Default("1").IntVar(&growthRounds)
	app.Flag("growth-largest-rounds", "Growth curve: rounds per agent at the largest point (at least --growth-rounds): the 1M-series figure a goal is judged on.").Default("3").IntVar(&growthLargestRounds)
	app.Flag("growth-agents", "Growth curve: agents (single processes).").Default("shoal", "prometheus-agent", "vmagent").StringsVar(&growthAgentsFlag)
	app.Flag("profile-duration", "Profile: CPU profile window of shoal (one replica) at the side-by-side load.").Default("30s").DurationVar(&profileDuration)
	app.Flag("shoal", "shoal binary.").StringVar(&shoalBin)
	app.Flag("shoal-missing", "Why the shoal binary is missing (e.g. its build error); reported instead of measuring shoal.").StringVar(&shoalMissing)
	app.Flag("prometheus", "Prometheus binary (run with --agent).").StringVar(&promBin)
	app.Flag("vmagent", "vmagent binary.").StringVar(&vmBin)
	app.Flag("work-dir", "Directory for configs, agent data, logs and raw profiles (default: a temporary directory).").StringVar(&workDir)
	app.Flag("doc", "Markdown file whose generated sections are replaced; empty prints to stdout.").Default("docs/BENCHMARKS.md").StringVar(&doc)
	app.Flag("readme", "Markdown file whose generated performance headline is replaced (only after a run of at least 3 side-by-side rounds); empty leaves it.").Default("README.md").StringVar(&readme)
	app.Flag("command", "The command line to record in the report.").StringVar(&command)
	app.Flag("micro-bench", "Packages whose Go micro-benchmarks are run and pasted.").Default("./ring/", "./scrape/", "./wal/").StringsVar(&microPkgs)
	app.Flag("micro-benchtime", "go test -benchtime for the micro-benchmarks.").Default("300ms").StringVar(&benchtime)
	app.Flag("ring-sizes", "Ring sizes for the balance and movement and the placement simulations.").Default("3", "10", "30", "100").IntsVar(&ringSizes)
	app.Flag("gossip-sizes", "Cluster sizes for the gossip convergence simulation.").Default("10", "50").IntsVar(&gossipSizes)
	app.Flag("gossip-rounds", "Rounds per cluster size in the gossip simulation (median and worst are reported).").Default("3").IntVar(&gossipRounds)
	app.Flag("skip-side-by-side", "Skip the multi-round agent comparison.").BoolVar(&skipSide)
	app.Flag("skip-idle", "Skip the idle point.").BoolVar(&skipIdle)
	app.Flag("skip-growth", "Skip the memory-growth curve.").BoolVar(&skipGrowth)
	app.Flag("skip-profile", "Skip the profiles of shoal.").BoolVar(&skipProfile)
	app.Flag("skip-sims", "Skip the ring, placement and gossip simulations.").BoolVar(&skipSims)
	app.Flag("skip-gossip", "Skip only the gossip simulation (the ring and placement simulations still run).").BoolVar(&skipGossip)
	app.Flag("skip-micro", "Skip the Go micro-benchmarks.").BoolVar(&skipMicro)
	kingpin.MustParse(app.Parse(os.Args[1:]))

	started := time.Now()
	logger := slog.New(elapsedHandler{slog.NewTextHandler(os.Stderr, nil), started})
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if command == "" {
		command = "go run ./bench/cmd/harness " + strings.Join(os.Args[1:], " ")
	}
	if workDir == "" {
		d, err := os.MkdirTemp("", "shoal-bench-")
		if err != nil {
			logger.Error("work directory", "err", err)
			os.Exit(1)
		}
		workDir = d
	}
	opts.Logger = logger
	machine := harness.ThisMachine()
	bad := func(what string, err error) {
		logger.Error("bad "+what, "err", err)
		os.Exit(2)
	}
	agents, err := agentsFor(agentsFlag, shoalBin, shoalMissing, promBin, vmBin)
	if err != nil {
		bad("--agents", err)
	}
	growthAgents, err := agentsFor(growthAgentsFlag, shoalBin, shoalMissing, promBin, vmBin)
	if err != nil {
		bad("--growth-agents", err)
	}
	for _, f := range splitList(growthSeriesFlag) {
		var n int
		if _, err := fmt.Sscan(f, &n); err != nil || n <= 0 {
			bad("--growth-series", fmt.Errorf("%q is not a positive number", f))
		}
		growthSeries = append(growthSeries, n)
	}
	if err := opts.Load.Validate(); err != nil {
		bad("load flags", err)
	}
	if rounds < 1 || growthRounds < 1 || growthTargets < 1 {
		bad("flags", fmt.Errorf("--rounds, --growth-rounds and --growth-targets must be at least 1"))
	}

	// The plan, so that whoever starts a run knows how long it takes.
	var plan []string
	total := time.Duration(0)
	add := func(name string, d time.Duration, on bool) {
		if on {
			plan = append(plan, fmt.Sprintf("%s %s", name, d.Round(time.Second)))
			total += d
		}
	}
	add("idle", time.Duration(len(agents))*(idleWarmup+idleDuration+perAgentOverhead), !skipIdle)
	add("side-by-side", time.Duration(rounds*len(agents))*(opts.Warmup+opts.Duration+perAgentOverhead), !skipSide)
	add("profile", opts.Warmup+profileDuration+perAgentOverhead, !skipProfile)
	growthRuns := (len(growthSeries)-1)*growthRounds + max(growthRounds, growthLargestRounds)
	add("growth", time.Duration(growthRuns*len(growthAgents))*(growthWarmup+growthDuration+perGrowthAgentOverhead), !skipGrowth)
	add("simulations", simsCost, !skipSims)
	add("micro-benchmarks", microCost, !skipMicro)
	logger.Info("plan: "+strings.Join(plan, ", "), "total_estimate", total.Round(time.Second),
		"plus", "up to --settle or --growth-settle per agent that is slow to settle", "work_dir", workDir)

	write := func(path, name, heading, content string) {
		if path == "" {
			fmt.Printf("## %s\n\n%s\n", heading, content)
			return
		}
		if err := harness.UpdateSection(path, name, heading, content); err != nil {
			logger.Error("cannot update the report", "doc", path, "err", err)
			os.Exit(1)
		}
		logger.Info("report section written", "doc", path, "section", name)
	}
	status := 0
	failed := func(rs []harness.Result) {
		for _, r := range rs {
			if r.Err != "" {
				status = 1
			}
		}
	}
	sideOpts := opts
	sideOpts.WorkDir = filepath.Join(workDir, "side-by-side")
	var in harness.GoalInputs
	su := harness.SideSetup{Options: sideOpts, Rounds: rounds, Machine: machine, Command: command, When: started}

	if !skipIdle && ctx.Err() == nil {
		o := opts
		o.Load = loadgen.Config{Targets: idleTargets, Series: idleSeries}
		// No settle check: a few samples per second arrive in lumps.
		o.Warmup, o.Duration, o.Settle, o.WorkDir = idleWarmup, idleDuration, 0, filepath.Join(workDir, "idle")
		logger.Info("idle point", "targets", idleTargets, "agents", len(agents))
		rs, err := harness.Run(ctx, o, agents)
		if err != nil {
			logger.Error("idle point failed", "err", err)
			status = 1
		} else {
			failed(rs)
			in.Idle = rs
			write(doc, "idle", "Idle point", harness.ReportIdle(rs, o, machine, command, started))
		}
	}

	if (!skipSide || !skipProfile) && ctx.Err() == nil {
		b, err := harness.Start(ctx, sideOpts)
		if err != nil {
			logger.Error("side-by-side load failed", "err", err)
			os.Exit(1)
		}
		if !skipSide {
			per := b.Rounds(ctx, agents, rounds, func(r, step, steps int, a harness.Agent) {
				logger.Info(fmt.Sprintf("side by side: round %d/%d, step %d/%d: %s", r+1, rounds, step, steps, a.Name))
			})
			for _, rs := range per {
				failed(rs)
			}
			in.Side = harness.Summarize(per)
			write(doc, "side-by-side", "Side by side", harness.ReportRounds(in.Side, su))
		}
		if !skipProfile && ctx.Err() == nil {
			a, err := agentsFor([]string{"shoal"}, shoalBin, shoalMissing, promBin, vmBin)
			if err != nil {
				bad("shoal", err)
			}
			logger.Info("profile of shoal", "window", profileDuration)
			r := b.Profile(ctx, a[0], profileDuration)
			failed([]harness.Result{r})
			if r.Profile != nil && r.Profile.Err != "" {
				status = 1
			}
			po := sideOpts
			po.Duration = profileDuration
			write(doc, "profile", "Profile of one shoal replica", harness.ReportProfile(r, po, machine, command, started))
			if r.Profile != nil {
				logger.Info("raw profiles kept", "cpu", r.Profile.CPUPath, "heap", r.Profile.HeapPath)
			}
		}
		b.Close()
	}

	if !skipGrowth && ctx.Err() == nil {
		for i, n := range growthSeries {
			o := opts
			o.Load = loadgen.Config{Targets: growthTargets, Series: max(n/growthTargets, 1)}
			o.ScrapeInterval, o.Warmup, o.Duration, o.Settle = growthInterval, growthWarmup, growthDuration, growthSettle
			o.WorkDir = filepath.Join(workDir, fmt.Sprintf("growth-%d", n))
			b, err := harness.Start(ctx, o)
			if err != nil {
				logger.Error("growth point failed", "series", n, "err", err)
				status = 1
				continue
			}
			// Alternate the order between points too, offset by the point.
			pointRounds := growthRounds
			if n == slices.Max(growthSeries) {
				pointRounds = max(growthRounds, growthLargestRounds)
			}
			per := b.Rounds(ctx, agents2(growthAgents, i), pointRounds, func(r, step, steps int, a harness.Agent) {
				logger.Info(fmt.Sprintf("growth: point %d/%d (%d series), step %d/%d: %s", i+1, len(growthSeries), b.ActiveSeries(), step, steps, a.Name))
			})
			b.Close()
			for _, rs := range per {
				failed(rs)
			}
			in.Growth = append(in.Growth, harness.GrowthPoint{Series: b.ActiveSeries(), Targets: growthTargets, Interval: growthInterval, Rounds: pointRounds, Agents: harness.Summarize(per)})
			if ctx.Err() != nil {
				break
			}
		}
		// Rows in the flag's order whatever the order of a point.
		for i := range in.Growth {
			in.Growth[i].Agents = byNames(in.Growth[i].Agents, growthAgents)
		}
		write(doc, "growth", "Memory growth", harness.ReportGrowth(in.Growth, growthWarmup, growthDuration, machine, command, started))
	}

	// The goals compare parts of one run, so they are judged only when the
	// run had all of them; a partial run leaves the last full run's verdicts.
	if skipSide || skipIdle || skipGrowth {
		logger.Info("goals and README headline left as they are: they need the idle point, the side by side and the growth curve of one run")
	} else if ctx.Err() == nil {
		goals := harness.EvaluateGoals(in)
		write(doc, "goals", "Goals", harness.ReportGoals(goals, machine, command, started))
		switch {
		case readme == "":
		case rounds < harness.MinHeadlineRounds:
			logger.Info(fmt.Sprintf("README headline left as it is: it quotes only runs of at least %d rounds", harness.MinHeadlineRounds), "rounds", rounds)
		default:
			write(readme, "performance", "Performance", harness.Headline(in.Side, su, in.Idle, in.Growth, goals))
		}
	}

	if !skipSims && ctx.Err() == nil {
		rep := fmt.Sprintf("Measured %s on %s. Command: `%s`\n\n", started.UTC().Format("2006-01-02 15:04 MST"), machine, command)
		logger.Info("ring and placement simulations", "sizes", ringSizes)
		write(doc, "ring", "Ring balance and movement (simulation)", rep+sim.RingReport(ringSizes, 512, 10000))
		write(doc, "placement", "Placement designs (simulation)", rep+sim.PlacementReport(ringSizes, 10000, sim.DefaultPlacementConfig()))
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
		write(doc, "gossip", "Gossip convergence (simulation)", rep+g)
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
		write(doc, "micro", "Go micro-benchmarks", s.String())
	}
	if ctx.Err() != nil {
		status = 1
	}
	logger.Info("done", "took", time.Since(started).Round(time.Second), "estimate_was", total.Round(time.Second), "status", status)
	os.Exit(status)
}

// elapsedHandler adds the time since the start to every log line, so that
// progress lines say how far a long run has got.
type elapsedHandler struct {
	slog.Handler
	start time.Time
}

func (h elapsedHandler) Handle(ctx context.Context, r slog.Record) error {
	r.AddAttrs(slog.String("elapsed", time.Since(h.start).Round(time.Second).String()))
	return h.Handler.Handle(ctx, r)
}

func (h elapsedHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return elapsedHandler{h.Handler.WithAttrs(as), h.start}
}

func (h elapsedHandler) WithGroup(name string) slog.Handler {
	return elapsedHandler{h.Handler.WithGroup(name), h.start}
}

// agents2 rotates the agent list by i, so that the growth curve's points
// do not all start with the same agent.
func agents2(as []harness.Agent, i int) []harness.Agent {
	if len(as) == 0 {
		return as
	}
	i %= len(as)
	return append(append([]harness.Agent{}, as[i:]...), as[:i]...)
}

// byNames puts summaries in the order of agents.
func byNames(ss []harness.Summary, agents []harness.Agent) []harness.Summary {
	var out []harness.Summary
	for _, a := range agents {
		for _, s := range ss {
			if s.Agent.Name == a.Name {
				out = append(out, s)
			}
		}
	}
	return out
}

func splitList(flags []string) []string {
	var out []string
	for _, f := range flags {
		for _, x := range strings.Split(f, ",") {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, x)
			}
		}
	}
	return out
}

func agentsFor(flags []string, shoalBin, shoalMissing, promBin, vmBin string) ([]harness.Agent, error) {
	var out []harness.Agent
	for _, name := range splitList(flags) {
		a, err := agentFor(name, shoalBin, shoalMissing, promBin, vmBin)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
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
