// Package monitors turns Prometheus Operator monitor objects (ServiceMonitor,
// PodMonitor, Probe and ScrapeConfig) into Prometheus scrape configs, the way
// the operator's own config generator does, so that shoal scrapes the same
// targets a Prometheus managed by the operator would.
//
// The operator's generator (pkg/prometheus of the operator's root module)
// does not build against the Prometheus version shoal uses, so this package
// is an independent implementation written from the operator's API types
// (pkg/apis/monitoring). Its output is checked against the operator's golden
// test files; the differences are listed in the package tests and below.
//
// Output is deterministic: the same objects, in any order, give the same jobs
// in the same order and byte-identical YAML, so every replica of a cluster
// builds the same configuration and the hash ring shards it like any other.
//
// Differences from the operator, on purpose:
//   - No sharding relabel rules (__tmp_hash, hashmod, $(SHARD)): shoal shards
//     targets with its ring, not with per-shard relabelling.
//   - TLS material from Secrets and ConfigMaps is inlined (ca, cert, key)
//     instead of written to files under /etc/prometheus/certs.
//   - A reference that cannot be resolved, or a field that cannot be
//     converted, rejects the whole object with an error naming the field;
//     the operator logs some of these and drops only the field.
//   - No Prometheus resource: scrape classes, enforced limits, enforced
//     namespace label, global podTargetLabels, the operator's API-server
//     settings and honor-label overrides do not exist; an object naming a
//     scrape class is rejected.
//
// The fields supported per kind, and the differences from the operator,
// are listed in SUPPORT.md next to this file.
package monitors

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/discovery"
	"go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"

	// The build's discoveries: monitors discover their targets through
	// Kubernetes, a ScrapeConfig object through any mechanism it names,
	// and the generated configuration parses only with it registered.
	"github.com/shoal-dev/shoal/internal/sdbuild"
)

// Kinds of monitor objects, as the operator names them.
const (
	KindServiceMonitor = monitoringv1.ServiceMonitorsKind
	KindPodMonitor     = monitoringv1.PodMonitorsKind
	KindProbe          = monitoringv1.ProbesKind
	KindScrapeConfig   = monitoringv1alpha1.ScrapeConfigsKind
)

// Objects is the set of monitor objects to convert. Order does not matter.
type Objects struct {
	ServiceMonitors []*monitoringv1.ServiceMonitor
	PodMonitors     []*monitoringv1.PodMonitor
	Probes          []*monitoringv1.Probe
	ScrapeConfigs   []*monitoringv1alpha1.ScrapeConfig
}

// Resolver returns the value of a key of a Secret or ConfigMap in a
// namespace. An informer-backed cache is the usual implementation.
type Resolver interface {
	SecretKey(ctx context.Context, namespace string, sel corev1.SecretKeySelector) (string, error)
	ConfigMapKey(ctx context.Context, namespace string, sel corev1.ConfigMapKeySelector) (string, error)
}

// Options changes how objects are converted. The zero value is the default.
type Options struct {
	// EndpointSlice makes ServiceMonitors discover with the endpointslice
	// role instead of endpoints, unless the object sets
	// spec.serviceDiscoveryRole itself.
	EndpointSlice bool
	// Global is the global section the jobs will be loaded with; each job
	// is checked against it (a scrape timeout above the interval it
	// inherits is an error only there). Nil means Prometheus' defaults.
	Global *config.GlobalConfig
}

// Source names the object a job was generated from.
type Source struct {
	Kind      string
	Namespace string
	Name      string
}

func (s Source) String() string { return s.Kind + " " + s.Namespace + "/" + s.Name }

// Job is one generated scrape config.
type Job struct {
	Source Source
	// Config is the parsed scrape config. Like a scrape config read from a
	// file it still needs Validate with the global config, which fills in
	// the global interval, timeout and protocols.
	Config *config.ScrapeConfig
	// YAML is Config as YAML, with secrets in clear text.
	YAML []byte
}

// Error is an object that could not be converted.
type Error struct {
	Source Source
	// Field is the path of the offending field, e.g.
	// "spec.endpoints[0].basicAuth.password"; empty when the object as a
	// whole is at fault.
	Field string
	Err   error
}

func (e *Error) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s: %v", e.Source, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", e.Source, e.Field, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Result is the outcome of a conversion: the jobs of every object that
// converted, sorted by job name, and one error per object that did not,
// sorted by kind, namespace and name.
type Result struct {
	Jobs   []Job
	Errors []*Error
	// Objects counts the converted objects per kind.
	Objects map[string]int
}

// YAML returns the jobs as a scrape_configs document (secrets in clear
// text). The same objects always give the same bytes.
func (r *Result) YAML() []byte {
	if len(r.Jobs) == 0 {
		return []byte("scrape_configs: []\n")
	}
	out := []byte("scrape_configs:\n")
	for _, j := range r.Jobs {
		out = append(out, indentListItem(j.YAML)...)
	}
	return out
}

// indentListItem turns a YAML mapping into an item of a YAML list.
func indentListItem(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/8)
	first := true
	for line := range splitLines(b) {
		if first {
			out = append(out, "- "...)
			first = false
		} else {
			out = append(out, "  "...)
		}
		out = append(out, line...)
		out = append(out, '\n')
	}
	return out
}

func splitLines(b []byte) func(func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(b) > 0 {
			i := slices.Index(b, '\n')
			if i < 0 {
				yield(b)
				return
			}
			if !yield(b[:i]) {
				return
			}
			b = b[i+1:]
		}
	}
}

// Convert converts objs into scrape configs, resolving the Secrets and
// ConfigMaps they reference with res. It never stops at a bad object: bad
// objects are reported in Result.Errors and contribute no job.
func Convert(ctx context.Context, objs Objects, res Resolver, opts Options) *Result {
	r := &Result{Objects: map[string]int{}}
	var gens []generated
	global := config.DefaultGlobalConfig
	if opts.Global != nil {
		global = *opts.Global
	}

	add := func(src Source, jobs []yaml.MapSlice, err *Error) {
		gens = append(gens, generated{src: src, jobs: jobs, err: err})
	}
	for _, m := range objs.ServiceMonitors {
		if m == nil {
			continue
		}
		c := newConverter(ctx, res, Source{KindServiceMonitor, m.Namespace, m.Name})
		add(c.src, c.serviceMonitor(m, opts), c.err)
	}
	for _, m := range objs.PodMonitors {
		if m == nil {
			continue
		}
		c := newConverter(ctx, res, Source{KindPodMonitor, m.Namespace, m.Name})
		add(c.src, c.podMonitor(m), c.err)
	}
	for _, m := range objs.Probes {
		if m == nil {
			continue
		}
		c := newConverter(ctx, res, Source{KindProbe, m.Namespace, m.Name})
		add(c.src, c.probe(m), c.err)
	}
	for _, m := range objs.ScrapeConfigs {
		if m == nil {
			continue
		}
		c := newConverter(ctx, res, Source{KindScrapeConfig, m.Namespace, m.Name})
		add(c.src, c.scrapeConfig(m), c.err)
	}

	// Two objects of the same kind, namespace and name would produce the
	// same job names. Which one wins must not depend on input order, so
	// every copy is rejected.
	slices.SortStableFunc(gens, func(a, b generated) int { return compareSource(a.src, b.src) })
	for i := 0; i < len(gens); {
		j := i + 1
		for j < len(gens) && gens[j].src == gens[i].src {
			j++
		}
		if j-i > 1 {
			r.Errors = append(r.Errors, &Error{Source: gens[i].src, Err: fmt.Errorf("%d objects with the same kind, namespace and name", j-i)})
			i = j
			continue
		}
		g := gens[i]
		i = j
		if g.err != nil {
			r.Errors = append(r.Errors, g.err)
			continue
		}
		jobs, err := parseJobs(g.src, g.jobs, global)
		if err != nil {
			r.Errors = append(r.Errors, err)
			continue
		}
		r.Jobs = append(r.Jobs, jobs...)
		r.Objects[g.src.Kind]++
	}
	slices.SortFunc(r.Jobs, func(a, b Job) int { return cmp.Compare(a.Config.JobName, b.Config.JobName) })
	return r
}

type generated struct {
	src  Source
	jobs []yaml.MapSlice
	err  *Error
}

func compareSource(a, b Source) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// parseJobs renders the generated jobs and parses them with Prometheus' own
// decoder and validation, which check every field the way a config file is
// checked, so that one bad object cannot make the merged config fail to load.
func parseJobs(src Source, jobs []yaml.MapSlice, global config.GlobalConfig) ([]Job, *Error) {
	out := make([]Job, 0, len(jobs))
	for _, j := range jobs {
		b, err := yaml.Marshal(j)
		if err != nil {
			return nil, &Error{Source: src, Err: fmt.Errorf("render scrape config: %w", err)}
		}
		sc := &config.ScrapeConfig{}
		if err := yaml.UnmarshalStrict(b, sc); err != nil {
			return nil, &Error{Source: src, Err: fmt.Errorf("generated scrape config %q is invalid: %w", jobName(j), sdbuild.Explain(err))}
		}
		// Validate fills in defaults, so it runs on a copy: Config stays
		// what the file form would parse to. It only assigns top-level
		// fields, so a shallow copy is enough.
		check := *sc
		if err := check.Validate(global); err != nil {
			return nil, &Error{Source: src, Err: fmt.Errorf("generated scrape config %q is invalid: %w", jobName(j), err)}
		}
		if err := staticLabelNames(&check); err != nil {
			return nil, &Error{Source: src, Err: fmt.Errorf("generated scrape config %q is invalid: %w", jobName(j), err)}
		}
		out = append(out, Job{Source: src, Config: sc, YAML: b})
	}
	return out, nil
}

// staticLabelNames checks the labels of static targets under the job's
// name validation scheme, which Validate has set. Prometheus loads them
// unchecked and drops a target that keeps one after relabeling; the
// operator refuses them, and so does shoal.
func staticLabelNames(sc *config.ScrapeConfig) error {
	for _, d := range sc.ServiceDiscoveryConfigs {
		groups, ok := d.(discovery.StaticConfig)
		if !ok {
			continue
		}
		for _, g := range groups {
			for name := range g.Labels {
				if !sc.MetricNameValidationScheme.IsValidLabelName(string(name)) {
					return fmt.Errorf("static_configs: label name %q is invalid under the %s name validation scheme", name, sc.MetricNameValidationScheme)
				}
			}
		}
	}
	return nil
}

func jobName(j yaml.MapSlice) string {
	for _, it := range j {
		if it.Key == "job_name" {
			s, _ := it.Value.(string)
			return s
		}
	}
	return ""
}
