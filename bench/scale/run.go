// Package scale runs a real shoal cluster of many processes on loopback
// addresses (127.0.50.x) against thousands of small targets and a real
// receiver, and measures what a platform team sizing a cluster asks: cold
// start, a rolling restart, a scale-out and back, a crash of several
// replicas, the idle cost per replica and the cluster-wide views. `make
// scale` runs it at 50 replicas and writes docs/SCALE.md; a 10-replica run
// is a test of this package.
package scale

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/shoal-dev/shoal/bench/loadgen"
	"github.com/shoal-dev/shoal/internal/receiver"
)

// Options configure a run. Zero values take the defaults noted.
type Options struct {
	// Shoal is the shoal binary. Required.
	Shoal string
	// Replicas is the cluster size. Default 50.
	Replicas int
	// Extra is how many replicas the scale-out adds (and the scale-in
	// removes again). Default Replicas/5.
	Extra int
	// Parallel scales out and in with all Extra replicas at once, as a
	// StatefulSet with podManagementPolicy Parallel (the chart's default)
	// does; false, one at a time, as OrderedReady does.
	Parallel bool
	// Kill is how many replicas are SIGKILLed at once. Default Replicas/10.
	Kill int
	// Targets is the number of targets. Default 5000.
	Targets int
	// Series is the number of series per target. Default 10.
	Series int
	// Interval is the scrape interval. Default 10s.
	Interval time.Duration
	// Idle is the window over which idle cost is measured. Default 60s.
	Idle time.Duration
	// WorkDir holds the processes' storage and logs. Required.
	WorkDir string
	// Subnet is the first three octets of the run's loopback addresses:
	// replica i is Subnet.(10+i), the targets listen on Subnet.2 and the
	// receiver on Subnet.3. Default "127.0.50". An address of its own keeps
	// other processes on the machine that scrape 127.0.0.1 ports they used
	// before (other tests) from scraping the run's targets.
	Subnet string
	// Args are further flags every replica gets (--log.level=debug to
	// follow a hand-off).
	Args []string
	// Logf reports progress. Default: discard.
	Logf func(format string, args ...any)
}

func (o Options) withDefaults() Options {
	if o.Replicas == 0 {
		o.Replicas = 50
	}
	if o.Extra == 0 {
		o.Extra = max(o.Replicas/5, 1)
	}
	if o.Kill == 0 {
		o.Kill = max(o.Replicas/10, 1)
	}
	if o.Targets == 0 {
		o.Targets = 5000
	}
	if o.Series == 0 {
		o.Series = 10
	}
	if o.Interval == 0 {
		o.Interval = 10 * time.Second
	}
	if o.Idle == 0 {
		o.Idle = 60 * time.Second
	}
	if o.Subnet == "" {
		o.Subnet = "127.0.50"
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	return o
}

// Phase is what one disruption cost.
type Phase struct {
	Name     string
	Duration time.Duration
	// Refusals by the receiver and failed samples reported by the replicas.
	Refusals Refusals
	Failed   float64
	Gaps     GapStats
	// CaughtUp is how long after the gap window's end the receiver held
	// every target's samples up to it (the gaps are read then): the
	// remote-write delay, holds included. Zero when it never did.
	CaughtUp time.Duration
	// Recovery is, for the crash, the time from the kill until every target
	// was scraped again; for the cold start, from the last replica ready
	// until every target was scraped.
	Recovery time.Duration
	// Doubles are targets scraped more often than one scraper could in the
	// intervals after the phase.
	Doubles int
	// MachineBusy is the machine's busy CPU share during the phase, and
	// ShoalCPU the CPU the shoal processes used (in cores).
	MachineBusy float64
	ShoalCores  float64
	Err         string
}

// Idle is the steady cost per replica.
type Idle struct {
	Window           time.Duration
	CPUMean, CPUMax  float64 // cores
	RSSMean, RSSMax  int64
	GoroutinesMean   int
	GoroutinesMax    int
	MachineBusy      float64
	Replicas         int
	SamplesPerSecond float64
	Err              string
}

// View is the latency and size of one cluster-wide view at full size.
type View struct {
	Name          string
	First, Median time.Duration
	Max           time.Duration
	Bytes         int
	Err           string
}

// Result is one run.
type Result struct {
	Options    Options
	Start      time.Time
	LoadBefore string // /proc/loadavg when the run started
	Cold       Phase
	Idle       Idle
	Views      []View
	Rolling    Phase
	ScaleOut   Phase
	ScaleIn    Phase
	Crash      Phase
	Total      time.Duration
	Err        string
}

// run is the state of one Run.
type run struct {
	o         Options
	lg        *loadgen.Server
	recv      *receiver.Receiver
	c         *cluster
	res       *Result
	logf      func(string, ...any)
	closeRecv func()
	phase     struct {
		start   time.Time
		cpu     CPUTimes
		stats   receiver.Stats
		failed  float64
		procCPU time.Duration
		// windowEnd is where the last phase's gap window ended.
		windowEnd time.Time
	}
}

// Run measures one cluster; it stops everything it started before it
// returns. A phase that fails is recorded and the run goes on where it can.
func Run(ctx context.Context, o Options) (Result, error) {
	o = o.withDefaults()
	res := Result{Options: o, Start: time.Now()}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		res.LoadBefore = string(b[:len(b)-1])
	}
	r := &run{o: o, res: &res, logf: o.Logf}
	if err := r.setUp(ctx); err != nil {
		r.tearDown()
		return res, err
	}
	defer r.tearDown()
	r.cold(ctx)
	if res.Cold.Err != "" {
		res.Total = time.Since(res.Start)
		return res, fmt.Errorf("cold start: %s", res.Cold.Err)
	}
	// An interrupted run stops between phases: a phase started after the
	// interrupt would only start processes to stop them again.
	for _, phase := range []func(context.Context){r.idle, r.views, r.rolling, r.scale, r.crash} {
		if ctx.Err() != nil {
			break
		}
		phase(ctx)
	}
	res.Total = time.Since(res.Start)
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("interrupted: %w", err)
	}
	return res, nil
}

func (r *run) setUp(ctx context.Context) error {
	o := r.o
	if o.Shoal == "" || o.WorkDir == "" {
		return fmt.Errorf("scale: Shoal and WorkDir are required")
	}
	var err error
	r.lg, err = loadgen.Start(ctx, loadgen.Config{Targets: o.Targets, Series: o.Series, HistogramFraction: -1, ListenHost: o.Subnet + ".2"}, nil)
	if err != nil {
		return err
	}
	sd := filepath.Join(o.WorkDir, "targets.json")
	if err := r.lg.WriteFileSD(sd); err != nil {
		return err
	}
	r.recv, err = receiver.New(filepath.Join(o.WorkDir, "receiver"), slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.Subnet+".3:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: r.recv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	r.closeRecv = func() { _ = srv.Close() }
	cfg := filepath.Join(o.WorkDir, "shoal.yml")
	body := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
scrape_configs:
  - job_name: loadgen
    file_sd_configs:
      - files: [%q]
remote_write:
  - url: "http://%s/api/v1/write"
`, o.Interval, min(o.Interval, 5*time.Second), sd, ln.Addr())
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		return err
	}
	r.c = &cluster{bin: o.Shoal, config: cfg, args: o.Args, waitFor: o.Replicas, base: o.Subnet, first: 10, dir: o.WorkDir,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	var ips []string
	for i := range o.Replicas + o.Extra {
		ips = append(ips, r.c.addrFor(i))
	}
	if r.c.gossipPort, err = freeOnAll(ips); err != nil {
		return err
	}
	r.c.webPort, err = freeOnAll(ips, r.c.gossipPort)
	return err
}

func (r *run) tearDown() {
	if r.c != nil {
		r.c.stopAll()
	}
	if r.closeRecv != nil {
		r.closeRecv()
	}
	if r.recv != nil {
		_ = r.recv.Close()
	}
	if r.lg != nil {
		r.lg.Close()
	}
}

// begin notes the counters a phase is measured against.
func (r *run) begin(ctx context.Context) {
	r.phase.start = time.Now()
	r.phase.cpu, _ = MachineCPU()
	r.phase.stats = r.recv.Stats()
	r.phase.failed, _ = r.c.failedSamples(ctx)
	r.phase.procCPU = r.shoalCPU()
}

// shoalCPU sums the CPU time of the running shoal processes; processes
// that exit take their time with them, so phases that restart replicas
// read low.
func (r *run) shoalCPU() time.Duration {
	var sum time.Duration
	for _, rep := range r.c.runningReplicas() {
		if u, err := procCPU(rep); err == nil {
			sum += u
		}
	}
	return sum
}

// end fills a phase's figures from the counters begin noted, once the
// receiver has caught up (two intervals after the last disruption).
func (r *run) end(ctx context.Context, p *Phase, err error) {
	if err != nil && p.Err == "" {
		p.Err = err.Error()
	}
	// The receiver catches up two intervals after the last disruption; the
	// gap window, which ends one interval before now, must also span at
	// least three intervals, or a target scraped on time reads as silent
	// in a short phase.
	wait := max(2*r.o.Interval, time.Until(r.phase.start.Add(4*r.o.Interval)))
	select {
	case <-ctx.Done():
	case <-time.After(wait):
	}
	now := time.Now()
	p.Duration = now.Sub(r.phase.start)
	cpu, _ := MachineCPU()
	p.MachineBusy = BusyShare(r.phase.cpu, cpu)
	if d := r.shoalCPU() - r.phase.procCPU; d > 0 {
		p.ShoalCores = d.Seconds() / p.Duration.Seconds()
	}
	p.Refusals = RefusalsBetween(r.phase.stats, r.recv.Stats())
	failed, ferr := r.c.failedSamples(ctx)
	p.Failed = failed - r.phase.failed
	if ferr != nil && p.Err == "" {
		p.Err = "reading failed samples: " + ferr.Error()
	}
	// The window ends one interval before now; its gaps are read once the
	// receiver holds every target's samples up to there (a target still
	// behind after catchUpTimeout shows as a gap).
	r.phase.windowEnd = now.Add(-r.o.Interval)
	p.CaughtUp = r.waitDelivered(ctx, r.phase.windowEnd, r.catchUpTimeout())
	p.Gaps = r.gaps(r.phase.start, r.phase.windowEnd)
	r.logf("%s: %v, refusals %d, failed %v, longest gap %v (%s), missed scrapes %d, receiver caught up after %v, machine busy %.0f%%%s",
		p.Name, p.Duration.Round(time.Second), p.Refusals.Total(), p.Failed, p.Gaps.Longest, p.Gaps.Target, p.Gaps.Missed, p.CaughtUp.Round(100*time.Millisecond), 100*p.MachineBusy, errSuffix(p.Err))
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return ", error: " + e
}

// upTimes reads every target's `up` sample timestamps from the receiver,
// staleness markers left out.
func (r *run) upTimes() (map[string][]int64, error) {
	all, err := r.recv.Samples(labels.MustNewMatcher(labels.MatchEqual, labels.MetricName, "up"))
	if err != nil {
		return nil, err
	}
	ts := make(map[string][]int64, len(all))
	for k, ss := range all {
		for _, s := range ss {
			if !s.IsStale() {
				ts[k] = append(ts[k], s.T)
			}
		}
	}
	return ts, nil
}

// catchUpTimeout bounds the wait for the receiver to catch up: the
// remote-write queues' batching and a hand-off hold for peers' samples,
// which takes a few seconds when nothing is wrong.
func (r *run) catchUpTimeout() time.Duration { return 3*r.o.Interval + 30*time.Second }

// waitDelivered waits until the receiver holds every target's samples up
// to until, and returns how long after until that was (0 if never within
// timeout).
func (r *run) waitDelivered(ctx context.Context, until time.Time, timeout time.Duration) time.Duration {
	deadline := time.Now().Add(timeout)
	for {
		if ts, err := r.upTimes(); err == nil && Undelivered(ts, r.o.Targets, until) == 0 {
			return time.Since(until)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return 0
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// gaps reads every target's `up` samples from the receiver.
func (r *run) gaps(from, to time.Time) GapStats {
	ts, err := r.upTimes()
	if err != nil {
		return GapStats{Target: "error: " + err.Error()}
	}
	for i := len(ts); i < r.o.Targets; i++ {
		ts["never-delivered-"+strconv.Itoa(i)] = nil
	}
	return Gaps(ts, from, to, r.o.Interval)
}

// settle waits n scrape intervals.
func (r *run) settle(ctx context.Context, n int) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(n) * r.o.Interval):
	}
}

// waitCovered waits until every target was scraped since t, and returns
// when that was.
func (r *run) waitCovered(ctx context.Context, since time.Time, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		n := Uncovered(r.lg.PerTarget(), since)
		if n == 0 {
			return time.Now(), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Time{}, fmt.Errorf("%d of %d targets not scraped within %v", n, r.o.Targets, timeout)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// doubles counts targets scraped twice per interval over n intervals.
func (r *run) doubles(ctx context.Context, n int) int {
	before := r.lg.PerTarget()
	t0 := time.Now()
	r.settle(ctx, n)
	after, window := r.lg.PerTarget(), time.Since(t0)
	d := DoubleScraped(before, after, window, r.o.Interval)
	for _, i := range d[:min(len(d), 5)] {
		r.logf("target %d scraped %d times in %v", i, after[i].Count-before[i].Count, window.Round(time.Millisecond))
	}
	return len(d)
}

// startAll launches replicas [from, to) at once and waits for all to be
// ready; it returns when the last one was.
func (r *run) startAll(ctx context.Context, from, to, joinSize int) (time.Time, error) {
	for i := from; i < to; i++ {
		if err := r.c.start(i, joinSize); err != nil {
			return time.Time{}, err
		}
	}
	var (
		mu   sync.Mutex
		last time.Time
		errs []error
		wg   sync.WaitGroup
	)
	for i := from; i < to; i++ {
		wg.Go(func() {
			at, err := r.c.waitReady(ctx, r.c.slot(i), 3*time.Minute+r.o.Interval*10)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if at.After(last) {
				last = at
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return last, errs[0]
	}
	return last, nil
}

func (r *run) cold(ctx context.Context) {
	p := &r.res.Cold
	p.Name = "cold start"
	r.logf("cold start: %d replicas at once, %d targets, interval %v", r.o.Replicas, r.o.Targets, r.o.Interval)
	r.begin(ctx)
	launched := time.Now()
	lastReady, err := r.startAll(ctx, 0, r.o.Replicas, r.o.Replicas)
	if err != nil {
		p.Err = err.Error()
		return
	}
	r.logf("cold start: all ready %v after launch", lastReady.Sub(launched).Round(time.Millisecond))
	covered, err := r.waitCovered(ctx, lastReady, 30*time.Second+3*r.o.Interval)
	if err == nil {
		p.Recovery = covered.Sub(lastReady)
		p.Doubles = r.doubles(ctx, 3)
	}
	r.end(ctx, p, err)
	if err == nil {
		// The window before the first scrape is not a gap.
		p.Gaps = r.gaps(covered, r.phase.windowEnd)
	}
}

func (r *run) idle(ctx context.Context) {
	id := &r.res.Idle
	reps := r.c.runningReplicas()
	id.Replicas, id.Window = len(reps), r.o.Idle
	r.logf("idle: measuring %d replicas for %v", len(reps), r.o.Idle)
	before := map[string]time.Duration{}
	for _, rep := range reps {
		before[rep.name], _ = procCPU(rep)
	}
	cpu0, _ := MachineCPU()
	acc0 := r.recv.Stats().Accepted
	t0 := time.Now()
	select {
	case <-ctx.Done():
	case <-time.After(r.o.Idle):
	}
	el := time.Since(t0)
	cpu1, _ := MachineCPU()
	id.MachineBusy = BusyShare(cpu0, cpu1)
	id.SamplesPerSecond = float64(r.recv.Stats().Accepted-acc0) / el.Seconds()
	var cpus []float64
	var rss []int64
	var gs []int
	for _, rep := range reps {
		u, err := r.c.usageOf(ctx, rep)
		if err != nil {
			id.Err = err.Error()
			continue
		}
		cpus = append(cpus, (u.cpu-before[rep.name]).Seconds()/el.Seconds())
		rss = append(rss, u.rss)
		gs = append(gs, u.goroutines)
	}
	id.CPUMean, id.CPUMax = meanMax(cpus)
	rm, rx := meanMax(toF(rss))
	id.RSSMean, id.RSSMax = int64(rm), int64(rx)
	gm, gx := meanMax(toF(gs))
	id.GoroutinesMean, id.GoroutinesMax = int(gm), int(gx)
	r.logf("idle: CPU %.3f cores mean per replica, RSS %.0f MiB mean, %d goroutines mean, machine busy %.0f%%",
		id.CPUMean, float64(id.RSSMean)/(1<<20), id.GoroutinesMean, 100*id.MachineBusy)
}

func toF[T int | int64](v []T) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func meanMax(v []float64) (mean, mx float64) {
	for _, x := range v {
		mean += x
		mx = max(mx, x)
	}
	if len(v) > 0 {
		mean /= float64(len(v))
	}
	return mean, mx
}

// rolling restarts every replica in turn, as a StatefulSet's rolling
// update does: the next one only once the previous one is ready again.
func (r *run) rolling(ctx context.Context) {
	p := &r.res.Rolling
	p.Name = "rolling restart"
	r.logf("rolling restart of %d replicas", r.o.Replicas)
	r.begin(ctx)
	var err error
	for i := r.o.Replicas - 1; i >= 0 && err == nil; i-- {
		rep := r.c.slot(i)
		if err = r.c.stop(ctx, rep, syscall.SIGTERM, 2*time.Minute); err != nil {
			break
		}
		if err = r.c.start(i, r.o.Replicas); err != nil {
			break
		}
		_, err = r.c.waitReady(ctx, rep, 3*time.Minute)
	}
	r.end(ctx, p, err)
}

// scale adds Extra replicas, then removes them again: one at a time,
// highest first on the way down, as a StatefulSet scales with
// OrderedReady, or all at once with Options.Parallel.
func (r *run) scale(ctx context.Context) {
	n, m := r.o.Replicas, r.o.Replicas+r.o.Extra
	how := ""
	if r.o.Parallel {
		how = " at once"
	}
	out := &r.res.ScaleOut
	out.Name = fmt.Sprintf("scale %d → %d%s", n, m, how)
	r.logf("%s", out.Name)
	r.begin(ctx)
	err := r.scaleOut(ctx, n, m)
	r.end(ctx, out, err)
	if err != nil {
		return
	}
	in := &r.res.ScaleIn
	in.Name = fmt.Sprintf("scale %d → %d%s", m, n, how)
	r.logf("%s", in.Name)
	r.begin(ctx)
	r.end(ctx, in, r.scaleIn(ctx, n, m))
}

func (r *run) scaleOut(ctx context.Context, n, m int) error {
	if r.o.Parallel {
		_, err := r.startAll(ctx, n, m, m)
		return err
	}
	for i := n; i < m; i++ {
		if err := r.c.start(i, m); err != nil {
			return err
		}
		if _, err := r.c.waitReady(ctx, r.c.slot(i), 3*time.Minute); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) scaleIn(ctx context.Context, n, m int) error {
	if !r.o.Parallel {
		for i := m - 1; i >= n; i-- {
			if err := r.c.stop(ctx, r.c.slot(i), syscall.SIGTERM, 2*time.Minute); err != nil {
				return err
			}
		}
		return nil
	}
	var leavers []*replica
	for i := n; i < m; i++ {
		leavers = append(leavers, r.c.slot(i))
	}
	return r.c.stopTogether(ctx, leavers, syscall.SIGTERM, 2*time.Minute)
}

// crash SIGKILLs Kill replicas at once, waits until every target is
// scraped again, then starts them again (a StatefulSet replaces its pods).
func (r *run) crash(ctx context.Context) {
	p := &r.res.Crash
	p.Name = fmt.Sprintf("SIGKILL %d at once", r.o.Kill)
	r.logf("%s", p.Name)
	r.begin(ctx)
	var victims []*replica
	for i := range r.o.Kill {
		// Spread over the cluster rather than the newest ones.
		victims = append(victims, r.c.slot(i*r.o.Replicas/r.o.Kill))
	}
	killed := time.Now()
	for _, v := range victims {
		_ = r.c.stop(ctx, v, syscall.SIGKILL, 10*time.Second)
	}
	covered, err := r.waitCovered(ctx, killed, 2*time.Minute)
	if err == nil {
		p.Recovery = covered.Sub(killed)
	}
	for _, v := range victims {
		if err2 := r.c.start(indexOf(r.c, v), r.o.Replicas); err2 != nil && err == nil {
			err = err2
		}
	}
	for _, v := range victims {
		if _, err2 := r.c.waitReady(ctx, v, 3*time.Minute); err2 != nil && err == nil {
			err = err2
		}
	}
	r.end(ctx, p, err)
}

func indexOf(c *cluster, v *replica) int {
	for i, r := range c.all() {
		if r == v {
			return i
		}
	}
	return -1
}

func procCPU(rep *replica) (time.Duration, error) {
	if !rep.running() {
		return 0, fmt.Errorf("%s not running", rep.name)
	}
	return procCPUOf(rep.cmd.Process.Pid)
}

// sortedDurations sorts in place and returns v.
func sortedDurations(v []time.Duration) []time.Duration {
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return v
}
