package scrape

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/prometheus/discovery/targetgroup"

	"github.com/shoal-dev/shoal/ring"
)

const benchTargets = 100_000

func benchFilter(b *testing.B) *Filter {
	b.Helper()
	f := newFilter(b, FilterOptions{}, nil, nil, nil)
	if err := f.ApplyConfig(loadConfig(b, twoJobs)); err != nil {
		b.Fatal(err)
	}
	f.merge(discovery(benchTargets, "node"))
	f.refilter(time.Now())
	return f
}

func nodes(n int) []string {
	res := make([]string, n)
	for i := range res {
		res[i] = fmt.Sprintf("shoal-%d", i)
	}
	return res
}

// BenchmarkRefilter measures the cost of a ring change with 100,000
// discovered targets: owners of every target, the hand-off bookkeeping and
// the filtered groups for the scrape manager. The ring alternates between N
// and N+1 nodes so that every iteration moves targets. hashmod is the
// baseline: Prometheus-style key % N sharding producing the same output.
func BenchmarkRefilter(b *testing.B) {
	for _, n := range []int{10, 100} {
		small, big := ring.New(nodes(n), 0), ring.New(append(nodes(n), "shoal-new"), 0)
		b.Run(fmt.Sprintf("ring/nodes=%d", n), func(b *testing.B) {
			f := benchFilter(b)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				r := small
				if i%2 == 1 {
					r = big
				}
				i++
				f.SetRing(r, "shoal-0", 1, true)
				f.refilter(time.Now())
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchTargets, "ns/target")
		})
		b.Run(fmt.Sprintf("hashmod/nodes=%d", n), func(b *testing.B) {
			f := benchFilter(b)
			js := f.jobs["node"]
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				shards := uint64(n + i%2)
				i++
				out := make([]*targetgroup.Group, len(js.groups))
				for gi, g := range js.groups {
					out[gi] = &targetgroup.Group{Source: g.Source, Labels: g.Labels}
				}
				for _, e := range js.entries {
					if e.reason == "" && e.key%shards == 0 {
						out[e.group].Targets = append(out[e.group].Targets, js.groups[e.group].Targets[e.index])
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchTargets, "ns/target")
		})
	}
}

// BenchmarkRekey measures a discovery update that changes every group: the
// relabelling (PopulateLabels) and key of all 100,000 targets, then
// ownership.
func BenchmarkRekey(b *testing.B) {
	f := benchFilter(b)
	f.SetRing(ring.New(nodes(10), 0), "shoal-0", 1, true)
	b.ReportAllocs()
	for b.Loop() {
		f.mu.Lock()
		f.jobs["node"].dirty = true
		f.mu.Unlock()
		f.refilter(time.Now())
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchTargets, "ns/target")
}
