package receiver

import (
	"context"
	"fmt"
	"math"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// Sample is one stored sample. H is nil for a float sample; for a native
// histogram sample H holds it (as a float histogram) and V is 0.
// A staleness marker is a float sample whose V satisfies value.IsStaleNaN
// (or a histogram whose H.Sum does).
type Sample struct {
	T int64
	V float64
	H *histogram.FloatHistogram
}

// IsStale reports whether s is a staleness marker.
func (s Sample) IsStale() bool {
	if s.H != nil {
		return value.IsStaleNaN(s.H.Sum)
	}
	return value.IsStaleNaN(s.V)
}

// everything selects every series: the TSDB needs at least one matcher.
var everything = labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, ".+")

// selectAll runs fn on every series matching all the matchers (all series
// when there are none), over all time.
func (r *Receiver) selectAll(matchers []*labels.Matcher, fn func(storage.Series) error) error {
	if len(matchers) == 0 {
		matchers = []*labels.Matcher{everything}
	}
	q, err := r.db.Querier(math.MinInt64, math.MaxInt64)
	if err != nil {
		return fmt.Errorf("open querier: %w", err)
	}
	defer q.Close()
	ss := q.Select(context.Background(), true, nil, matchers...)
	for ss.Next() {
		if err := fn(ss.At()); err != nil {
			return err
		}
	}
	return ss.Err()
}

// Series returns the label sets of the series matching all the matchers
// (every series when none is given), sorted.
func (r *Receiver) Series(matchers ...*labels.Matcher) ([]labels.Labels, error) {
	var out []labels.Labels
	err := r.selectAll(matchers, func(s storage.Series) error {
		out = append(out, s.Labels())
		return nil
	})
	return out, err
}

// Samples returns every stored sample (floats, histograms and staleness
// markers) of the series matching all the matchers, keyed by the series'
// labels.Labels.String(), in timestamp order.
func (r *Receiver) Samples(matchers ...*labels.Matcher) (map[string][]Sample, error) {
	out := map[string][]Sample{}
	var it chunkenc.Iterator
	err := r.selectAll(matchers, func(s storage.Series) error {
		var samples []Sample
		it = s.Iterator(it)
		for {
			switch it.Next() {
			case chunkenc.ValNone:
				if err := it.Err(); err != nil {
					return fmt.Errorf("read %s: %w", s.Labels(), err)
				}
				out[s.Labels().String()] = samples
				return nil
			case chunkenc.ValFloat:
				t, v := it.At()
				samples = append(samples, Sample{T: t, V: v})
			case chunkenc.ValHistogram, chunkenc.ValFloatHistogram:
				t, fh := it.AtFloatHistogram(nil)
				samples = append(samples, Sample{T: t, H: fh})
			}
		}
	})
	return out, err
}

// StaleMarkers returns the timestamps of the staleness markers of the
// series matching all the matchers, keyed like Samples. Series without
// markers are left out.
func (r *Receiver) StaleMarkers(matchers ...*labels.Matcher) (map[string][]int64, error) {
	all, err := r.Samples(matchers...)
	if err != nil {
		return nil, err
	}
	out := map[string][]int64{}
	for k, ss := range all {
		for _, s := range ss {
			if s.IsStale() {
				out[k] = append(out[k], s.T)
			}
		}
	}
	return out, nil
}
