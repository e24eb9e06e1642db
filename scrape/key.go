package scrape

import (
	"errors"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"
	"go.yaml.in/yaml/v2"
)

// LabelsKey returns the ring key of a target: xxhash64 over its final
// labels after relabelling, without the internal "__" ones, which is the
// identity of the series its samples belong to. A target is placed by what
// it is, not by how it is scraped: a change of scheme, path, params or
// client settings never moves it, so replicas whose configurations differ
// in such settings (a reload that has reached some of them, a rolling
// restart) still agree on its owner. A key moves only when the series do;
// two replicas then never write one series under two keys.
func LabelsKey(final labels.Labels) uint64 {
	var d xxhash.Digest
	d.Reset()
	_, _ = d.WriteString("shoal-target\xff")
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

// TargetKeyString hashes a job name and a scrape URL the way keys were
// made before they followed labels. Nothing places by it any more; the
// benchmark simulator uses it for synthetic, uniformly spread keys.
func TargetKeyString(job, scrapeURL string) uint64 {
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
// job's relabel_configs) on one discovered target and returns its key
// (LabelsKey of the final labels), its
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
	return LabelsKey(final), scrapeURL, final, nil
}

// ConfigID identifies what of a set of scrape configurations decides which
// targets exist and what is scraped from them: per job, its name, scheme,
// metrics path, params and target relabelling. It is equal on every node
// that loaded configurations alike in these (in any order), never zero.
// Nodes announce it with their fences, so that a replica running another
// scrape configuration shows as drift (placement.Drift). Keys do not depend
// on it (see LabelsKey). Discovery, client and limit settings are left out
// on purpose: they may differ between replicas (a file path per pod, say)
// without changing what is scraped.
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
