package monitors

import (
	"errors"
	"fmt"
	"strconv"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v2"
)

// serviceMonitor generates one job per endpoint, named
// serviceMonitor/<namespace>/<name>/<endpoint index> like the operator does.
func (c *converter) serviceMonitor(m *monitoringv1.ServiceMonitor, opts Options) []yaml.MapSlice {
	c.noScrapeClass(m.Spec.ScrapeClassName)
	if len(m.Spec.Endpoints) == 0 {
		c.fail("spec.endpoints", errors.New("no endpoints"))
	}
	role := "endpoints"
	if opts.EndpointSlice {
		role = "endpointslice"
	}
	if r := m.Spec.ServiceDiscoveryRole; r != nil {
		switch *r {
		case monitoringv1.EndpointsRole:
			role = "endpoints"
		case monitoringv1.EndpointSliceRole:
			role = "endpointslice"
		default:
			c.fail("spec.serviceDiscoveryRole", fmt.Errorf("unknown role %q", *r))
		}
	}
	roleSelector := c.useRoleSelector("spec.selectorMechanism", m.Spec.SelectorMechanism)
	var jobs []yaml.MapSlice
	for i, ep := range m.Spec.Endpoints {
		jobs = append(jobs, c.serviceMonitorEndpoint(m, ep, i, role, roleSelector))
	}
	return jobs
}

func (c *converter) serviceMonitorEndpoint(m *monitoringv1.ServiceMonitor, ep monitoringv1.Endpoint, i int, role string, roleSelector bool) yaml.MapSlice {
	f := "spec.endpoints[" + strconv.Itoa(i) + "]"
	cfg := yaml.MapSlice{
		item("job_name", fmt.Sprintf("serviceMonitor/%s/%s/%d", m.Namespace, m.Name, i)),
		item("honor_labels", ep.HonorLabels),
	}
	cfg = boolItem(cfg, "honor_timestamps", ep.HonorTimestamps)
	cfg = boolItem(cfg, "track_timestamps_staleness", ep.TrackTimestampsStaleness)

	var roleSelectors []string
	if roleSelector {
		roleSelectors = []string{role, "service"}
	}
	cfg = append(cfg, c.kubernetesSD("spec.selector", role, m.Spec.NamespaceSelector, m.Spec.AttachMetadata, roleSelectors, &m.Spec.Selector))
	cfg = c.endpointCommon(cfg, f, ep.Interval, ep.ScrapeTimeout, ep.Path, ep.Params, ep.Scheme)

	cfg = c.proxy(cfg, f, ep.ProxyConfig)
	cfg = c.tls(cfg, f+".tlsConfig", ep.TLSConfig)
	if ep.BearerTokenFile != "" { //nolint:staticcheck // deprecated but still part of the API
		cfg = kv(cfg, "bearer_token_file", ep.BearerTokenFile) //nolint:staticcheck
	}
	cfg = c.httpConfigWithoutTLS(cfg, f, ep.HTTPConfigWithoutTLS)

	// Relabelling, in the operator's order: keep the discovered job, select
	// the services, select the port, name the target, then the user's rules.
	sd := "__meta_kubernetes_endpoint"
	if role == "endpointslice" {
		sd = "__meta_kubernetes_endpointslice"
	}
	rl := initRelabelings()
	if !roleSelector {
		rl = append(rl, c.selectorRelabelings("spec.selector", "__meta_kubernetes_service", m.Spec.Selector)...)
	}
	switch {
	case ep.Port != "":
		rl = append(rl, yaml.MapSlice{item("action", "keep"), item("source_labels", relabelKeys(sd+"_port_name")), item("regex", ep.Port)})
	case ep.TargetPort != nil && ep.TargetPort.StrVal != "":
		rl = append(rl, yaml.MapSlice{item("action", "keep"), item("source_labels", relabelKeys("__meta_kubernetes_pod_container_port_name")), item("regex", ep.TargetPort.StrVal)})
	case ep.TargetPort != nil && ep.TargetPort.IntVal != 0:
		rl = append(rl, yaml.MapSlice{item("action", "keep"), item("source_labels", relabelKeys("__meta_kubernetes_pod_container_port_number")), item("regex", strconv.Itoa(int(ep.TargetPort.IntVal)))})
	}
	kind := []string{sd + "_address_target_kind", sd + "_address_target_name"}
	rl = append(rl,
		yaml.MapSlice{item("source_labels", kind), item("separator", ";"), item("regex", "Node;(.*)"), item("replacement", "${1}"), item("target_label", "node")},
		yaml.MapSlice{item("source_labels", kind), item("separator", ";"), item("regex", "Pod;(.*)"), item("replacement", "${1}"), item("target_label", "pod")},
		copyRelabeling("__meta_kubernetes_namespace", "namespace"),
		copyRelabeling("__meta_kubernetes_service_name", "service"),
		copyRelabeling("__meta_kubernetes_pod_name", "pod"),
		copyRelabeling("__meta_kubernetes_pod_container_name", "container"),
	)
	if ep.FilterRunning == nil || *ep.FilterRunning {
		rl = append(rl, runningFilter())
	}
	for _, l := range m.Spec.TargetLabels {
		rl = append(rl, labelRelabeling("__meta_kubernetes_service_label_"+sanitizeLabelName(l), sanitizeLabelName(l)))
	}
	for _, l := range m.Spec.PodTargetLabels {
		rl = append(rl, labelRelabeling("__meta_kubernetes_pod_label_"+sanitizeLabelName(l), sanitizeLabelName(l)))
	}
	rl = append(rl, yaml.MapSlice{item("source_labels", relabelKeys("__meta_kubernetes_service_name")), item("target_label", "job"), item("replacement", "${1}")})
	if m.Spec.JobLabel != "" {
		rl = append(rl, labelRelabeling("__meta_kubernetes_service_label_"+sanitizeLabelName(m.Spec.JobLabel), "job"))
	}
	switch {
	case ep.Port != "":
		rl = append(rl, yaml.MapSlice{item("target_label", "endpoint"), item("replacement", ep.Port)})
	case ep.TargetPort != nil && ep.TargetPort.String() != "":
		rl = append(rl, yaml.MapSlice{item("target_label", "endpoint"), item("replacement", ep.TargetPort.String())})
	}
	rl = append(rl, c.relabelings(f+".relabelings", ep.RelabelConfigs)...)
	cfg = kv(cfg, "relabel_configs", rl)

	cfg = c.monitorSettings(cfg, monitorSettings{
		limits: limits{m.Spec.SampleLimit, m.Spec.TargetLimit, m.Spec.LabelLimit, m.Spec.LabelNameLengthLimit, m.Spec.LabelValueLengthLimit, m.Spec.KeepDroppedTargets},
		native: m.Spec.NativeHistogramConfig, protocols: m.Spec.ScrapeProtocols, fallback: m.Spec.FallbackScrapeProtocol,
		extraMetrics: m.Spec.ExtraScrapeMetrics, bodySizeLimit: m.Spec.BodySizeLimit,
	})
	if len(ep.MetricRelabelConfigs) > 0 {
		cfg = kv(cfg, "metric_relabel_configs", c.relabelings(f+".metricRelabelings", ep.MetricRelabelConfigs))
	}
	return cfg
}

// endpointCommon renders the per-endpoint scrape settings monitors share.
func (c *converter) endpointCommon(cfg yaml.MapSlice, f string, interval, timeout monitoringv1.Duration, path string, params map[string][]string, sch *monitoringv1.Scheme) yaml.MapSlice {
	if interval != "" {
		cfg = kv(cfg, "scrape_interval", string(interval))
	}
	if timeout != "" {
		cfg = kv(cfg, "scrape_timeout", string(timeout))
	}
	if path != "" {
		cfg = kv(cfg, "metrics_path", path)
	}
	if params != nil {
		cfg = kv(cfg, "params", params)
	}
	if sch != nil && *sch != "" {
		cfg = kv(cfg, "scheme", scheme(sch))
	}
	return cfg
}

type monitorSettings struct {
	limits        limits
	native        monitoringv1.NativeHistogramConfig
	protocols     []monitoringv1.ScrapeProtocol
	fallback      *monitoringv1.ScrapeProtocol
	extraMetrics  *bool
	bodySizeLimit *monitoringv1.ByteSize
}

func (c *converter) monitorSettings(cfg yaml.MapSlice, s monitorSettings) yaml.MapSlice {
	cfg = c.limits(cfg, s.limits)
	cfg = c.nativeHistograms(cfg, s.native)
	cfg = protocols(cfg, s.protocols, s.fallback)
	cfg = boolItem(cfg, "extra_scrape_metrics", s.extraMetrics)
	if s.bodySizeLimit != nil && *s.bodySizeLimit != "" {
		cfg = kv(cfg, "body_size_limit", string(*s.bodySizeLimit))
	}
	return cfg
}
