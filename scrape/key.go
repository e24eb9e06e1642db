package scrape

import (
	"errors"
	"net/url"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"
)

// TargetKey returns the ring key of a target: xxhash64 of the job name, a
// 0xff byte and the target's final scrape URL. u is the URL Prometheus
// scrapes, as returned by (*promscrape.Target).URL().
func TargetKey(job string, u *url.URL) uint64 {
	return keyOf(job, u.String())
}

// TargetKeyString is TargetKey for a URL already rendered with
// (*url.URL).String().
func TargetKeyString(job, scrapeURL string) uint64 {
	return keyOf(job, scrapeURL)
}

func keyOf(job, scrapeURL string) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString(job)
	_, _ = d.WriteString("\xff")
	_, _ = d.WriteString(scrapeURL)
	return d.Sum64()
}

// ErrDropped is returned by KeyFor when relabelling drops the target: such a
// target has no key and is never owned by anyone.
var ErrDropped = errors.New("target dropped by relabelling")

// KeyFor runs Prometheus' own target preparation (PopulateLabels, with the
// job's relabel_configs) on one discovered target and returns its key, its
// final scrape URL and its final labels. It returns ErrDropped when
// relabelling drops the target and another error when the target is invalid
// (no address, bad interval, ...). lb may be nil; passing one reuses it.
func KeyFor(lb *labels.Builder, cfg *config.ScrapeConfig, targetLabels, groupLabels model.LabelSet) (key uint64, scrapeURL string, final labels.Labels, err error) {
	if lb == nil {
		lb = labels.NewBuilder(labels.EmptyLabels())
	}
	final, err = promscrape.PopulateLabels(lb, cfg, targetLabels, groupLabels)
	if err != nil {
		return 0, "", labels.EmptyLabels(), err
	}
	if final.IsEmpty() {
		return 0, "", final, ErrDropped
	}
	scrapeURL = promscrape.NewTarget(final, cfg, targetLabels, groupLabels).URL().String()
	return keyOf(cfg.JobName, scrapeURL), scrapeURL, final, nil
}
