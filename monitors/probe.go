package monitors

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v2"
)

// probe generates the job probe/<namespace>/<name>: the prober is scraped
// with each target passed as the target parameter, like the operator does.
func (c *converter) probe(m *monitoringv1.Probe) []yaml.MapSlice {
	c.noScrapeClass(m.Spec.ScrapeClassName)
	if err := checkProberAddress(m.Spec.ProberSpec.URL); err != nil {
		c.fail("spec.prober.url", err)
	}
	if err := m.Spec.Targets.Validate(); err != nil {
		c.fail("spec.targets", err)
	}
	if m.Spec.Targets.StaticConfig != nil && m.Spec.Targets.Ingress != nil {
		// The operator uses staticConfig and ignores ingress silently.
		c.fail("spec.targets", errors.New("staticConfig and ingress are both set; set one"))
	}
	if m.Spec.HTTPConfig.Authorization != nil {
		c.fail("spec.authorization", errors.New("set twice"))
	}

	cfg := yaml.MapSlice{
		item("job_name", fmt.Sprintf("probe/%s/%s", m.Namespace, m.Name)),
		item("honor_timestamps", true),
	}
	path := m.Spec.ProberSpec.Path
	if path == "" {
		path = "/probe" // the CRD's default
	}
	cfg = kv(cfg, "metrics_path", path)
	if m.Spec.Interval != "" {
		cfg = kv(cfg, "scrape_interval", string(m.Spec.Interval))
	}
	if m.Spec.ScrapeTimeout != "" {
		cfg = kv(cfg, "scrape_timeout", string(m.Spec.ScrapeTimeout))
	}
	if m.Spec.ProberSpec.Scheme != nil && *m.Spec.ProberSpec.Scheme != "" {
		cfg = kv(cfg, "scheme", scheme(m.Spec.ProberSpec.Scheme))
	}
	params := yaml.MapSlice{}
	if m.Spec.Module != "" {
		params = kv(params, "module", []string{m.Spec.Module})
	}
	for i, p := range m.Spec.Params {
		if p.Name == "" {
			c.fail(fmt.Sprintf("spec.params[%d].name", i), errors.New("required"))
		}
		if m.Spec.Module != "" && p.Name == "module" {
			continue // spec.module wins, as with the operator
		}
		params = kv(params, p.Name, p.Values)
	}
	if len(params) > 0 {
		cfg = kv(cfg, "params", params)
	}
	cfg = c.monitorSettings(cfg, monitorSettings{
		limits: limits{m.Spec.SampleLimit, m.Spec.TargetLimit, m.Spec.LabelLimit, m.Spec.LabelNameLengthLimit, m.Spec.LabelValueLengthLimit, m.Spec.KeepDroppedTargets},
		native: m.Spec.NativeHistogramConfig, protocols: m.Spec.ScrapeProtocols, fallback: m.Spec.FallbackScrapeProtocol,
		extraMetrics: m.Spec.ExtraScrapeMetrics,
	})

	rl := initRelabelings()
	if m.Spec.JobName != "" {
		rl = append(rl, yaml.MapSlice{item("target_label", "job"), item("replacement", m.Spec.JobName)})
	}
	cfg = c.proxy(cfg, "spec.prober", m.Spec.ProberSpec.ProxyConfig)

	switch {
	case m.Spec.Targets.StaticConfig != nil:
		sc := m.Spec.Targets.StaticConfig
		labels := map[string]string{"namespace": m.Namespace}
		for k, v := range sc.Labels {
			labels[k] = v
		}
		cfg = kv(cfg, "static_configs", []yaml.MapSlice{{item("targets", sc.Targets), item("labels", labels)}})
		rl = append(rl,
			copyRelabeling("__address__", "__param_target"),
			copyRelabeling("__param_target", "instance"),
			yaml.MapSlice{item("target_label", "__address__"), item("replacement", m.Spec.ProberSpec.URL)},
		)
		rl = append(rl, c.relabelings("spec.targets.staticConfig.relabelingConfigs", sc.RelabelConfigs)...)
	case m.Spec.Targets.Ingress != nil:
		in := m.Spec.Targets.Ingress
		rl = append(rl, c.selectorRelabelings("spec.targets.ingress.selector", "__meta_kubernetes_ingress", in.Selector)...)
		cfg = append(cfg, c.kubernetesSD("spec.targets.ingress.selector", "ingress", in.NamespaceSelector, nil, nil, nil))
		rl = append(rl,
			yaml.MapSlice{
				item("source_labels", relabelKeys("__meta_kubernetes_ingress_scheme", "__address__", "__meta_kubernetes_ingress_path")),
				item("separator", ";"), item("regex", "(.+);(.+);(.+)"), item("target_label", "__param_target"),
				item("replacement", "${1}://${2}${3}"), item("action", "replace"),
			},
			copyRelabeling("__meta_kubernetes_namespace", "namespace"),
			copyRelabeling("__meta_kubernetes_ingress_name", "ingress"),
			yaml.MapSlice{
				item("source_labels", relabelKeys("__address__")), item("separator", ";"), item("regex", "(.*)"),
				item("target_label", "__tmp_ingress_address"), item("replacement", "$1"), item("action", "replace"),
			},
			copyRelabeling("__param_target", "instance"),
			yaml.MapSlice{item("target_label", "__address__"), item("replacement", m.Spec.ProberSpec.URL)},
		)
		rl = append(rl, c.relabelings("spec.targets.ingress.relabelingConfigs", in.RelabelConfigs)...)
	}
	cfg = kv(cfg, "relabel_configs", rl)

	cfg = c.safeTLS(cfg, "spec.tlsConfig", m.Spec.TLSConfig)
	h := m.Spec.HTTPConfigWithoutTLS
	h.Authorization = m.Spec.Authorization
	cfg = c.httpConfigWithoutTLS(cfg, "spec", h)
	if len(m.Spec.MetricRelabelConfigs) > 0 {
		cfg = kv(cfg, "metric_relabel_configs", c.relabelings("spec.metricRelabelings", m.Spec.MetricRelabelConfigs))
	}
	return []yaml.MapSlice{cfg}
}

// hostname is a DNS name as the operator's check has it (underscores and a
// final dot allowed).
var hostname = regexp.MustCompile(`^[a-zA-Z0-9_][a-zA-Z0-9_-]*(\.[a-zA-Z0-9_][a-zA-Z0-9_-]*)*\.?$`)

// checkProberAddress accepts host or host:port, as the operator does: the
// prober's scheme and path are fields of their own, and an address with
// either would make every target of the job invalid.
func checkProberAddress(addr string) error {
	if addr == "" {
		return errors.New("required")
	}
	if strings.Contains(addr, "/") {
		return fmt.Errorf("%q is not host or host:port (the scheme and path are fields of their own)", addr)
	}
	host := addr
	if h, port, err := net.SplitHostPort(addr); err == nil {
		if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 {
			return fmt.Errorf("%q: invalid port %q", addr, port)
		}
		host = h
	}
	if net.ParseIP(host) == nil && !hostname.MatchString(host) {
		return fmt.Errorf("%q is not host or host:port (the scheme and path are fields of their own)", addr)
	}
	return nil
}
