package ring

import (
	"fmt"
	"testing"
)

// BenchmarkOwners measures one lookup. The hashmod sub-benchmarks are the
// baseline: Prometheus-style sharding with key % N, which is a single
// division but moves almost every key when N changes (see moved-frac).
func BenchmarkOwners(b *testing.B) {
	keys := testKeys(1<<16, 51)
	for _, nodes := range []int{10, 100, 1000} {
		names := nodeNames(nodes)
		r := New(names, 0)
		for _, rf := range []int{1, 3} {
			b.Run(fmt.Sprintf("ring/nodes=%d/rf=%d", nodes, rf), func(b *testing.B) {
				buf := make([]string, 0, rf)
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					buf = r.Owners(keys[i&(len(keys)-1)], rf, buf)
					i++
				}
			})
		}
		b.Run(fmt.Sprintf("hashmod/nodes=%d", nodes), func(b *testing.B) {
			var sink string
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				sink = names[keys[i&(len(keys)-1)]%uint64(len(names))]
				i++
			}
			_ = sink
		})
	}
}

// BenchmarkMoved reports the fraction of keys that change primary owner when
// one node joins N, for the ring and for hashmod, as custom metrics.
func BenchmarkMoved(b *testing.B) {
	keys := testKeys(20_000, 61)
	for _, nodes := range []int{10, 100} {
		names := nodeNames(nodes)
		b.Run(fmt.Sprintf("ring/nodes=%d", nodes), func(b *testing.B) {
			var frac float64
			for b.Loop() {
				before := New(names, 0)
				after := New(append(names[:len(names):len(names)], "shoal-new"), 0)
				moved := 0
				for _, k := range keys {
					if before.Primary(k) != after.Primary(k) {
						moved++
					}
				}
				frac = float64(moved) / float64(len(keys))
			}
			b.ReportMetric(frac, "moved-frac")
		})
		b.Run(fmt.Sprintf("hashmod/nodes=%d", nodes), func(b *testing.B) {
			var frac float64
			for b.Loop() {
				moved := 0
				for _, k := range keys {
					if k%uint64(nodes) != k%uint64(nodes+1) {
						moved++
					}
				}
				frac = float64(moved) / float64(len(keys))
			}
			b.ReportMetric(frac, "moved-frac")
		})
	}
}

// BenchmarkNew measures rebuilding the ring, which shoal does on every
// membership change.
func BenchmarkNew(b *testing.B) {
	for _, nodes := range []int{10, 100, 1000} {
		names := nodeNames(nodes)
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			b.ReportAllocs()
			var r *Ring
			for b.Loop() {
				r = New(names, 0)
			}
			b.ReportMetric(float64(r.SizeBytes()), "table-bytes")
		})
	}
}

// BenchmarkNewBounded measures a full bounded-load placement, which a node
// recomputes whenever the participants or the published weights change.
func BenchmarkNewBounded(b *testing.B) {
	for _, nodes := range []int{10, 100} {
		r := New(nodeNames(nodes), 0)
		for _, targets := range []int{10_000, 100_000} {
			ts := skewedLoads(targets, 61, true)
			b.Run(fmt.Sprintf("nodes=%d/targets=%d", nodes, targets), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					NewBounded(r, ts, 0, 1)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(targets), "ns/target")
			})
			// NewSticky from a settled placement: every key with its owner.
			owned := withOwners(NewSticky(r, unowned(ts), 0, 1), unowned(ts))
			b.Run(fmt.Sprintf("sticky/nodes=%d/targets=%d", nodes, targets), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					NewSticky(r, owned, 0, 1)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(targets), "ns/target")
			})
		}
	}
}
