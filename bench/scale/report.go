package scale

import (
	"fmt"
	"strings"
	"time"

	"github.com/shoal-dev/shoal/bench/sim"
	shoalcluster "github.com/shoal-dev/shoal/cluster"
)

// Goal is one row of the goal table: what was promised and what was seen.
type Goal struct {
	What, Want, Got string
	Met             bool
}

// Goals checks a run against the cluster goals of docs/SCALE.md.
func Goals(res Result) []Goal {
	iv := res.Options.Interval
	var out []Goal
	if res.Options.Replicas == 0 {
		return nil // the processes were not run
	}
	roll := res.Rolling
	if roll.Name == "" {
		out = append(out, Goal{What: fmt.Sprintf("%d replicas, rolling restart", res.Options.Replicas),
			Want: "0 refusals, 0 failed samples, longest gap ≤ 3 intervals", Got: "not measured: the run stopped before it"})
	} else {
		out = append(out, Goal{
			What: fmt.Sprintf("%d replicas, rolling restart", res.Options.Replicas),
			Want: "0 refusals, 0 failed samples, longest gap ≤ 3 intervals",
			Got: fmt.Sprintf("%d refusals, %v failed, longest gap %v (%.1f intervals)", roll.Refusals.Total(), roll.Failed,
				roll.Gaps.Longest.Round(100*time.Millisecond), roll.Gaps.Longest.Seconds()/iv.Seconds()),
			Met: roll.Err == "" && roll.Refusals.Total() == 0 && roll.Failed == 0 && roll.Gaps.Longest <= 3*iv,
		})
	}
	c := res.Cold
	out = append(out, Goal{
		What: fmt.Sprintf("%d replicas, cold start to every target scraped once", res.Options.Replicas),
		Want: "≤ 30 s after the last replica is ready",
		Got:  fmt.Sprintf("%v, %d targets scraped twice", c.Recovery.Round(100*time.Millisecond), c.Doubles),
		Met:  c.Err == "" && c.Recovery <= 30*time.Second && c.Doubles == 0,
	})
	for _, v := range res.Views {
		if v.Name == "GET /cluster" || v.Name == "GET /api/v1/cluster/targets" {
			out = append(out, Goal{
				What: fmt.Sprintf("`%s` at %d peers, %d targets", strings.TrimPrefix(v.Name, "GET "), res.Options.Replicas, res.Options.Targets),
				Want: "≤ 1 s, bounded fan-out",
				Got:  fmt.Sprintf("median %v, first %v, max %v, %s", v.Median.Round(time.Millisecond), v.First.Round(time.Millisecond), v.Max.Round(time.Millisecond), size(v.Bytes)),
				Met:  v.Err == "" && v.Median <= time.Second,
			})
		}
	}
	return out
}

// SimGoals checks the membership simulation against the goals at 50 and
// 1,000 members: settled gossip per member, and agreement after one member
// joins the settled cluster, a leave and a crash (the cold start of all
// members at once is reported beside it). FenceWaitGoal covers the wait
// of a gained target.
func SimGoals(ms []sim.Members) []Goal {
	var out []Goal
	for _, m := range ms {
		gossip := func(want float64) Goal {
			g := Goal{What: fmt.Sprintf("idle gossip per member at %d (simulated, settled)", m.N), Want: fmt.Sprintf("≤ %.0f KB/s", want/1000)}
			if m.Err != "" {
				g.Got = "not measured: " + m.Err
				return g
			}
			g.Got = fmt.Sprintf("%.1f KB/s (in+out)", m.BytesPerMember/1000)
			g.Met = m.BytesPerMember <= want
			return g
		}
		switch m.N {
		case 50:
			out = append(out, gossip(5000))
		case 1000:
			agree := Goal{What: "1,000 members: ring agreement after join/leave/crash (simulated)", Want: "≤ 10 s"}
			if m.Err != "" {
				agree.Got = "not measured: " + m.Err
			} else {
				r := func(d time.Duration) time.Duration { return d.Round(10 * time.Millisecond) }
				agree.Got = fmt.Sprintf("join %v, leave %v, crash %v (protocol time; all %d started at once: %v)", r(m.OneJoin), r(m.Leave), r(m.Crash), m.N, r(m.Join))
				agree.Met = max(m.OneJoin, m.Leave, m.Crash) <= 10*time.Second
			}
			out = append(out, agree, gossip(20000))
		}
	}
	return out
}

// FenceWaitGoal states the bound of a gained target's wait for fences at
// the largest simulated size: a fence announcement is a metadata update,
// pushed straight to every peer, so the simulation's update time is how
// long the announcement takes to reach every member; the rest of the wait
// follows from the code (placement's gate).
func FenceWaitGoal(ms []sim.Members) Goal {
	g := Goal{What: "1,000 members: gained target waits for fences", Want: "bounded independently of N (state the bound)"}
	var m *sim.Members
	for i := range ms {
		if ms[i].Err == "" && (m == nil || ms[i].N > m.N) {
			m = &ms[i]
		}
	}
	bound := "at most `--cluster.handoff-delay` (2 s) while every peer follows the same ring; while a peer follows another ring under which it may own the target, until it has fenced this one, at most `--cluster.handoff-timeout` (5 min); a peer on a ring this node built that does not give it the target holds it past the delay only for the cluster's update bound (6.4 s at 50 members, 12.8 s at 1,000)"
	if m == nil {
		g.Got = "not measured; by the code: " + bound
		return g
	}
	reached := fmt.Sprintf("a fence announcement reached all %d members in %v (one pushed packet per peer, not gossip rounds)", m.N, m.Update.Round(time.Millisecond))
	if m.N < 1000 {
		g.Got = fmt.Sprintf("not measured at 1,000 members (the largest simulated: %s); by the code: %s", reached, bound)
		return g
	}
	g.Got = fmt.Sprintf("%s; the wait is the slowest peer's time to fence: %s", reached, bound)
	g.Met = m.Update <= time.Second
	return g
}

func size(b int) string {
	switch {
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.0f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}

// Report renders a run as Markdown: the setup, the goals, every phase,
// the idle cost and the views, then the membership simulation, if any.
// A Result whose Options.Replicas is 0 means the processes were not run
// (the simulation alone).
func Report(res Result, sims []sim.Members, command string) string {
	o := res.Options
	var b strings.Builder
	if o.Replicas > 0 {
		fmt.Fprintf(&b, "Measured by `%s` on %s, %s. Setup: %d replicas (each its own process on %s.x, its own storage), %d targets × %d series (each target its own port), scrape interval %v, remote write to a real Prometheus TSDB receiver; shoal's defaults otherwise. Load average when the run started: %s (the machine is shared).\n\n",
			command, res.Start.UTC().Format("2006-01-02 15:04 UTC"), machine(), o.Replicas, o.Subnet, o.Targets, o.Series, o.Interval, res.LoadBefore)
	} else {
		fmt.Fprintf(&b, "Measured by `%s` on %s, %s: the membership simulation only, the processes were not run. Load average when the run started: %s (the machine is shared).\n\n",
			command, res.Start.UTC().Format("2006-01-02 15:04 UTC"), machine(), res.LoadBefore)
	}
	b.WriteString("| goal | want | measured | met |\n|---|---|---|---|\n")
	goals := Goals(res)
	if len(sims) > 0 {
		goals = append(append(goals, SimGoals(sims)...), FenceWaitGoal(sims))
	}
	for _, g := range goals {
		met := yes(g.Met)
		if !g.Met && strings.HasPrefix(g.Got, "not measured") {
			met = "–"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.What, g.Want, g.Got, met)
	}
	if o.Replicas > 0 {
		writeProcesses(&b, res)
	}
	if len(sims) > 0 {
		b.WriteString("\n**Membership simulation** (real cluster.Node members, memberlist with shoal's settings and metadata, over an in-memory network in one process (bench/sim memNet), in protocol time (a testing/synctest bubble: every timer runs on a clock that moves only when every member waits, so CPU costs no time and the network has no latency); times are the protocol's, a lower bound on a real network; bytes are exact; an update seen within 5ms was seen at the first poll. Gossip is settled once a 30 s window's rate is at most half the first window's (or at most 1 KB/s per member) and falls by less than a tenth from the window before; \"right after the joins\" is the first window after the ring was agreed):\n\n")
		b.WriteString(sim.MembersReport(sims))
		writeWeightsWire(&b)
	}
	return b.String()
}

// writeProcesses renders the process run: every phase, the idle cost and
// the views.
func writeProcesses(b *strings.Builder, res Result) {
	o := res.Options
	b.WriteString("\n**Disruptions.** Refusals are samples the receiver rejected or rolled back; failed samples are what the replicas counted in `prometheus_remote_storage_samples_failed_total` (every life of every replica); a gap is the longest time any target's `up` went without a sample at the receiver; missed scrapes count whole intervals missing over all targets; the gaps are read once the receiver has caught up, that is holds every target's samples up to the end of the phase's window (the column says how long after that end; never: not within 3 intervals + 30 s, and the missing tail counts as gap). Machine busy is the whole machine's CPU (2 cores) during the phase, shoal's share is the CPU of the shoal processes in cores.\n\n")
	b.WriteString("| phase | time | refusals | failed samples | longest gap | missed scrapes | recovery | receiver caught up | machine busy | shoal CPU |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range []Phase{res.Cold, res.Rolling, res.ScaleOut, res.ScaleIn, res.Crash} {
		if p.Name == "" {
			continue
		}
		rec := "–"
		if p.Recovery > 0 {
			rec = p.Recovery.Round(100 * time.Millisecond).String()
		}
		caught := "never"
		if p.CaughtUp > 0 {
			caught = p.CaughtUp.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(b, "| %s | %v | %d | %v | %v (%.1f intervals) | %d | %s | %s | %.0f%% | %.2f cores |\n", p.Name, p.Duration.Round(time.Second),
			p.Refusals.Total(), p.Failed, p.Gaps.Longest.Round(100*time.Millisecond), p.Gaps.Longest.Seconds()/o.Interval.Seconds(),
			p.Gaps.Missed, rec, caught, 100*p.MachineBusy, p.ShoalCores)
	}
	for _, p := range []Phase{res.Cold, res.Rolling, res.ScaleOut, res.ScaleIn, res.Crash} {
		if p.Err != "" {
			fmt.Fprintf(b, "\n- %s: %s", p.Name, p.Err)
		}
	}
	b.WriteString("\n\nCold start recovery is from the last replica ready until every target was scraped; crash recovery from the kill until every target was scraped again. ")
	fmt.Fprintf(b, "Samples lost in the crash: %d missed scrapes × %d series ≈ %d samples.\n\n", res.Crash.Gaps.Missed, o.Series+5, res.Crash.Gaps.Missed*(o.Series+5))

	id := res.Idle
	fmt.Fprintf(b, "**Idle cost per replica** (%d replicas, over %v, %.0f samples/s delivered by the cluster, machine %.0f%% busy): CPU %.3f cores mean (%.3f max), RSS %s mean (%s max), %d goroutines mean (%d max).",
		id.Replicas, id.Window, id.SamplesPerSecond, 100*id.MachineBusy, id.CPUMean, id.CPUMax, size(int(id.RSSMean)), size(int(id.RSSMax)), id.GoroutinesMean, id.GoroutinesMax)
	if id.Err != "" {
		fmt.Fprintf(b, " (errors: %s)", id.Err)
	}
	b.WriteString(" Gossip bytes are not counted per process (the processes share one loopback interface and shoal exports no byte counter for memberlist); the simulation below counts them exactly for the same members, settings and metadata.")
	fmt.Fprintf(b, "\n\n**Cluster-wide views at %d peers** (asked %d times on one replica, more than the 1 s peer-answer cache apart, so each asks every peer):\n\n| view | first | median | max | answer |\n|---|---|---|---|---|\n", o.Replicas, viewRounds)
	for _, v := range res.Views {
		if v.Err != "" {
			fmt.Fprintf(b, "| %s | error: %s | | | |\n", v.Name, v.Err)
			continue
		}
		fmt.Fprintf(b, "| %s | %v | %v | %v | %s |\n", v.Name, v.First.Round(time.Millisecond), v.Median.Round(time.Millisecond), v.Max.Round(time.Millisecond), size(v.Bytes))
	}
	fmt.Fprintf(b, "\nTotal run time %v.\n", res.Total.Round(time.Second))
}

// writeWeightsWire renders what the placement weights cost on the wire at
// 50 members, measured with the nodes' own encoders.
func writeWeightsWire(b *strings.Builder) {
	b.WriteString("\nPlacement weights on the wire (`--cluster.placement=bounded` only), 50 members, the cluster's targets spread evenly over their sets (`cluster.WeightsWireSizes`): a push/pull carries every set whole only on a join or while a member of an older version is in the cluster, otherwise the sets' versions; a publication sends each peer a delta.\n\n")
	b.WriteString("| targets | push/pull, whole | push/pull, versions only | delta, 1 weight changed | delta, 100 changed |\n|---:|---:|---:|---:|---:|\n")
	for _, t := range []int{10_000, 100_000, 1_000_000} {
		whole, summary, one := shoalcluster.WeightsWireSizes(t, 50, 1)
		_, _, hundred := shoalcluster.WeightsWireSizes(t, 50, 100)
		fmt.Fprintf(b, "| %d | %s | %s | %d B | %s |\n", t, size(whole), size(summary), one, size(hundred))
	}
}
