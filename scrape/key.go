package scrape

import (
	"errors"
	"net/url"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"
	"go.yaml.in/yaml/v2"
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

// seriesID identifies the series a target's samples belong to: its final
// labels without the internal "__" ones, as Prometheus puts them on samples.
// Two keys with one seriesID are one target whose URL changed.
func seriesID(final labels.Labels) uint64 {
	var d xxhash.Digest
	d.Reset()
	final.Range(func(l labels.Label) {
		if strings.HasPrefix(l.Name, model.ReservedLabelPrefix) {
			return
		}
		_, _ = d.WriteString(l.Name)
		_, _ = d.WriteString("\xff")
		_, _ = d.WriteString(l.Value)
		_, _ = d.WriteString("\xff")
	})
	return d.Sum64()
}

// ConfigID identifies what of a set of scrape configurations decides the
// target keys: per job, its name, scheme, metrics path, params and target
// relabelling. It is equal on every node that loaded configurations that
// key targets alike (in any order), never zero. The hand-off uses it to tell
// whether the peers have applied a reload that may have moved targets to
// other keys. Discovery, client and limit settings are left out on purpose:
// they may differ between replicas (a file path per pod, say) without moving
// any key, and a difference here makes every gained target wait for the
// hand-off delay and every hold for the peers' next fence.
func ConfigID(scfgs []*config.ScrapeConfig) uint64 {
	type keyed struct {
		Job         string              `yaml:"job"`
		Scheme      string              `yaml:"scheme"`
		MetricsPath string              `yaml:"metrics_path"`
		Params      map[string][]string `yaml:"params,omitempty"`
		Relabel     any                 `yaml:"relabel_configs,omitempty"`
	}
	sorted := slices.Clone(scfgs)
	slices.SortFunc(sorted, func(a, b *config.ScrapeConfig) int { return strings.Compare(a.JobName, b.JobName) })
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString("shoal-scrape-config\xff")
	for _, sc := range sorted {
		b, err := yaml.Marshal(keyed{Job: sc.JobName, Scheme: sc.Scheme, MetricsPath: sc.MetricsPath, Params: sc.Params, Relabel: sc.RelabelConfigs})
		if err != nil {
			// Not expected for a loaded config; the job name still counts.
			b = []byte(sc.JobName)
		}
		_, _ = d.Write(b)
		_, _ = d.WriteString("\xff")
	}
	if s := d.Sum64(); s != 0 {
		return s
	}
	return 1
}
