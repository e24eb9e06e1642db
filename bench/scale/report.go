package scale

import (
	"fmt"
	"strings"
	"time"
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
	roll := res.Rolling
	out = append(out, Goal{
		What: fmt.Sprintf("%d replicas, rolling restart", res.Options.Replicas),
		Want: "0 refusals, 0 failed samples, longest gap ≤ 3 intervals",
		Got: fmt.Sprintf("%d refusals, %v failed, longest gap %v (%.1f intervals)", roll.Refusals.Total(), roll.Failed,
			roll.Gaps.Longest.Round(100*time.Millisecond), roll.Gaps.Longest.Seconds()/iv.Seconds()),
		Met: roll.Err == "" && roll.Refusals.Total() == 0 && roll.Failed == 0 && roll.Gaps.Longest <= 3*iv,
	})
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
// the idle cost and the views. sim is the simulation's section, if any.
func Report(res Result, sim, command string) string {
	o := res.Options
	var b strings.Builder
	fmt.Fprintf(&b, "Measured by `%s` on %s, %s. Setup: %d replicas (each its own process on 127.0.0.x, its own storage), %d targets × %d series (each target its own port), scrape interval %v, remote write to a real Prometheus TSDB receiver; shoal's defaults otherwise. Load average when the run started: %s (the machine is shared).\n\n",
		command, res.Start.UTC().Format("2006-01-02 15:04 UTC"), machine(), o.Replicas, o.Targets, o.Series, o.Interval, res.LoadBefore)
	b.WriteString("| goal | want | measured | met |\n|---|---|---|---|\n")
	for _, g := range Goals(res) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", g.What, g.Want, g.Got, yes(g.Met))
	}
	b.WriteString("\n**Disruptions.** Refusals are samples the receiver rejected or rolled back; failed samples are what the replicas counted in `prometheus_remote_storage_samples_failed_total` (every life of every replica); a gap is the longest time any target's `up` went without a sample at the receiver; missed scrapes count whole intervals missing over all targets. Machine busy is the whole machine's CPU (2 cores) during the phase, shoal's share is the CPU of the shoal processes in cores.\n\n")
	b.WriteString("| phase | time | refusals | failed samples | longest gap | missed scrapes | recovery | machine busy | shoal CPU |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, p := range []Phase{res.Cold, res.Rolling, res.ScaleOut, res.ScaleIn, res.Crash} {
		if p.Name == "" {
			continue
		}
		rec := "–"
		if p.Recovery > 0 {
			rec = p.Recovery.Round(100 * time.Millisecond).String()
		}
		fmt.Fprintf(&b, "| %s | %v | %d | %v | %v (%.1f intervals) | %d | %s | %.0f%% | %.2f cores |\n", p.Name, p.Duration.Round(time.Second),
			p.Refusals.Total(), p.Failed, p.Gaps.Longest.Round(100*time.Millisecond), p.Gaps.Longest.Seconds()/o.Interval.Seconds(),
			p.Gaps.Missed, rec, 100*p.MachineBusy, p.ShoalCores)
	}
	for _, p := range []Phase{res.Cold, res.Rolling, res.ScaleOut, res.ScaleIn, res.Crash} {
		if p.Err != "" {
			fmt.Fprintf(&b, "\n- %s: %s", p.Name, p.Err)
		}
	}
	b.WriteString("\n\nCold start recovery is from the last replica ready until every target was scraped; crash recovery from the kill until every target was scraped again. ")
	fmt.Fprintf(&b, "Samples lost in the crash: %d missed scrapes × %d series ≈ %d samples.\n\n", res.Crash.Gaps.Missed, o.Series+5, res.Crash.Gaps.Missed*(o.Series+5))

	id := res.Idle
	fmt.Fprintf(&b, "**Idle cost per replica** (%d replicas, over %v, %.0f samples/s delivered by the cluster, machine %.0f%% busy): CPU %.3f cores mean (%.3f max), RSS %s mean (%s max), %d goroutines mean (%d max).",
		id.Replicas, id.Window, id.SamplesPerSecond, 100*id.MachineBusy, id.CPUMean, id.CPUMax, size(int(id.RSSMean)), size(int(id.RSSMax)), id.GoroutinesMean, id.GoroutinesMax)
	if id.Err != "" {
		fmt.Fprintf(&b, " (errors: %s)", id.Err)
	}
	fmt.Fprintf(&b, "\n\n**Cluster-wide views at %d peers** (asked %d times in a row on one replica; each asks every peer):\n\n| view | first | median | max | answer |\n|---|---|---|---|---|\n", o.Replicas, viewRounds)
	for _, v := range res.Views {
		if v.Err != "" {
			fmt.Fprintf(&b, "| %s | error: %s | | | |\n", v.Name, v.Err)
			continue
		}
		fmt.Fprintf(&b, "| %s | %v | %v | %v | %s |\n", v.Name, v.First.Round(time.Millisecond), v.Median.Round(time.Millisecond), v.Max.Round(time.Millisecond), size(v.Bytes))
	}
	fmt.Fprintf(&b, "\nTotal run time %v.\n", res.Total.Round(time.Second))
	if sim != "" {
		b.WriteString("\n" + sim)
	}
	return b.String()
}
