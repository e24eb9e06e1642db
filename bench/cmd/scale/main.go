// Command scale runs the scale harness (bench/scale): a real cluster of
// shoal processes on 127.0.0.x against thousands of targets and a real
// receiver, through a cold start, a rolling restart, a scale-out and back
// and a crash; it writes the figures into docs/SCALE.md between generated
// markers. `make scale` runs it with the defaults below.
package main

import (
	"context"
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
)

func main() {
	var o scale.Options
	flag.IntVar(&o.Replicas, "replicas", 50, "cluster size")
	flag.IntVar(&o.Extra, "extra", 10, "replicas the scale-out adds and the scale-in removes")
	flag.IntVar(&o.Kill, "kill", 5, "replicas SIGKILLed at once")
	flag.IntVar(&o.Targets, "targets", 5000, "targets")
	flag.IntVar(&o.Series, "series", 10, "series per target")
	flag.DurationVar(&o.Interval, "interval", 10*time.Second, "scrape interval")
	flag.DurationVar(&o.Idle, "idle", 60*time.Second, "idle measurement window")
	workdir := flag.String("workdir", "", "work directory (default: a new temporary directory, removed afterwards)")
	out := flag.String("out", "docs/SCALE.md", "Markdown file whose generated section is replaced; empty prints it")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir := *workdir
	if dir == "" {
		d, err := os.MkdirTemp("", "shoal-scale-")
		if err != nil {
			log.Fatal(err)
		}
		defer os.RemoveAll(d)
		dir = d
	}
	o.WorkDir = dir
	o.Shoal = filepath.Join(dir, "shoal")
	log.Printf("building shoal into %s", o.Shoal)
	build := exec.CommandContext(ctx, "go", "build", "-o", o.Shoal, "./cmd/shoal")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		log.Fatalf("go build ./cmd/shoal: %v", err)
	}
	o.Logf = log.Printf
	res, err := scale.Run(ctx, o)
	if err != nil {
		log.Printf("run incomplete: %v", err)
	}
	md := scale.Report(res, "", "make scale")
	if *out == "" {
		fmt.Println(md)
		return
	}
	if err := harness.UpdateSection(*out, "scale", "Measured", md); err != nil {
		log.Fatal(err)
	}
	log.Printf("wrote %s (%s)", *out, strings.TrimSpace(res.LoadBefore))
	if err != nil {
		os.Exit(1)
	}
}
