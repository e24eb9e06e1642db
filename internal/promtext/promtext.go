// Package promtext reads metric values from a /metrics page in the
// Prometheus text format. Tests reach it through internal/testutil; the
// benchmark harnesses in bench/ use it directly, since non-test code imports
// no test helper.
package promtext

import (
	"fmt"
	"io"
	"slices"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Parse reads a /metrics page in the text exposition format.
func Parse(r io.Reader) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(r)
}

// Value returns the sum over the series of family name whose labels include
// want: counter and gauge values, a histogram's or summary's sample count.
// It is an error when no series matches, so that a metric that was never
// registered does not read as zero.
func Value(mfs map[string]*dto.MetricFamily, name string, want map[string]string) (float64, error) {
	mf, ok := mfs[name]
	if !ok {
		return 0, fmt.Errorf("metric %s not exposed", name)
	}
	sum, found := 0.0, false
	for _, m := range mf.GetMetric() {
		if !LabelsMatch(m.GetLabel(), want) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		case m.Summary != nil:
			sum += float64(m.GetSummary().GetSampleCount())
		}
	}
	if !found {
		return 0, fmt.Errorf("metric %s has no series with labels %v", name, want)
	}
	return sum, nil
}

// LabelsMatch reports whether lps has every name=value pair of want.
func LabelsMatch(lps []*dto.LabelPair, want map[string]string) bool {
	for k, v := range want {
		if !slices.ContainsFunc(lps, func(lp *dto.LabelPair) bool { return lp.GetName() == k && lp.GetValue() == v }) {
			return false
		}
	}
	return true
}
