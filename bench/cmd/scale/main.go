// Command scale runs the scale harness (bench/scale): a real cluster of
// shoal processes on 127.0.50.x against thousands of targets and a real
// receiver, through a cold start, a rolling restart, a scale-out and back
// and a crash; it writes the figures into docs/SCALE.md between generated
// markers. `make scale` runs it with the defaults below.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/shoal-dev/shoal/bench/harness"
	"github.com/shoal-dev/shoal/bench/scale"
	"github.com/shoal-dev/shoal/bench/sim"
)

// simulate runs the in-process membership simulation at each size, before
// the processes start. It runs as a test (bench/sim TestMembersAtScale),
// in a testing/synctest bubble, so that its durations are the protocol's
// and not how long a thousand members take to share two cores.
func simulate(ctx context.Context, sizes, dir string) []sim.Members {
	if sizes == "" {
		return nil
	}
	out := filepath.Join(dir, "members.json")
	log.Printf("simulating %s members (go test ./bench/sim -run TestMembersAtScale)", sizes)
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout=3h", "-run=^TestMembersAtScale$", "./bench/sim",
		"-args", "-sim.members="+sizes, "-sim.out="+out)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Printf("membership simulation: %v", err)
		return nil
	}
	b, err := os.ReadFile(out)
	var ms []sim.Members
	if err == nil {
		err = json.Unmarshal(b, &ms)
	}
	if err != nil {
		log.Printf("membership simulation results: %v", err)
		return nil
	}
	for _, m := range ms {
		log.Printf("%d members: %+v", m.N, m)
	}
	return ms
}

func main() { os.Exit(run()) }

func run() int {
	var o scale.Options
	flag.IntVar(&o.Replicas, "replicas", 50, "cluster size")
	flag.IntVar(&o.Extra, "extra", 10, "replicas the scale-out adds and the scale-in removes")
	flag.IntVar(&o.Kill, "kill", 5, "replicas SIGKILLed at once")
	flag.BoolVar(&o.Parallel, "parallel", false, "scale out and in with all the extra replicas at once (podManagementPolicy: Parallel); default one at a time")
	flag.IntVar(&o.Targets, "targets", 5000, "targets")
	flag.IntVar(&o.Series, "series", 10, "series per target")
	flag.DurationVar(&o.Interval, "interval", 10*time.Second, "scrape interval")
	flag.DurationVar(&o.Idle, "idle", 60*time.Second, "idle measurement window")
	flag.StringVar(&o.Subnet, "subnet", "", "first three octets of the run's loopback addresses (default 127.0.50)")
	logLevel := flag.String("log.level", "", "the replicas' --log.level (default: theirs, info)")
	flag.Func("arg", "a further flag of every replica, e.g. -arg=--cluster.placement=bounded (repeatable)", func(s string) error {
		o.Args = append(o.Args, s)
		return nil
	})
	workdir := flag.String("workdir", "", "work directory (default: a new temporary directory, removed afterwards)")
	members := flag.String("members", "50,1000", "member counts of the in-process gossip simulation, comma-separated; empty skips it")
	processes := flag.Bool("processes", true, "run the shoal processes; false runs the simulation alone")
	out := flag.String("out", "docs/SCALE.md", "Markdown file whose generated section is replaced; empty prints it")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := *workdir
	if dir == "" {
		d, err := os.MkdirTemp("", "shoal-scale-")
		if err != nil {
			log.Print(err)
			return 1
		}
		defer os.RemoveAll(d)
		dir = d
	}
	o.WorkDir = dir
	if *logLevel != "" {
		o.Args = append(o.Args, "--log.level="+*logLevel)
	}
	o.Shoal = filepath.Join(dir, "shoal")
	o.Logf = log.Printf
	if *processes {
		log.Printf("building shoal into %s", o.Shoal)
		build := exec.CommandContext(ctx, "go", "build", "-o", o.Shoal, "./cmd/shoal")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			log.Printf("go build ./cmd/shoal: %v", err)
			return 1
		}
	}
	res := scale.Result{Start: time.Now()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadBefore = strings.TrimSpace(string(b))
	}
	sims := simulate(ctx, *members, dir)
	var runErr error
	if *processes {
		if res, runErr = scale.Run(ctx, o); runErr != nil {
			log.Printf("run incomplete: %v", runErr)
		}
	}
	md := scale.Report(res, sims, "make scale")
	if *out == "" {
		fmt.Println(md)
	} else if err := harness.UpdateSection(*out, "scale", "Measured", md); err != nil {
		log.Print(err)
		return 1
	} else {
		log.Printf("wrote %s (load before: %s)", *out, res.LoadBefore)
	}
	if runErr != nil {
		return 1
	}
	return 0
}
