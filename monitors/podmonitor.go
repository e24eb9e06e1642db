package monitors

import (
	"errors"
	"fmt"
	"strconv"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"go.yaml.in/yaml/v2"
)

// podMonitor generates one job per endpoint, named
// podMonitor/<namespace>/<name>/<endpoint index> like the operator does.
func (c *converter) podMonitor(m *monitoringv1.PodMonitor) []yaml.MapSlice {
	c.noScrapeClass(m.Spec.ScrapeClassName)
	if len(m.Spec.PodMetricsEndpoints) == 0 {
		c.fail("spec.podMetricsEndpoints", errors.New("no endpoints"))
	}
	roleSelector := c.useRoleSelector("spec.selectorMechanism", m.Spec.SelectorMechanism)
	var jobs []yaml.MapSlice
	for i, ep := range m.Spec.PodMetricsEndpoints {
		jobs = append(jobs, c.podMonitorEndpoint(m, ep, i, roleSelector))
	}
	return jobs
}

func (c *converter) podMonitorEndpoint(m *monitoringv1.PodMonitor, ep monitoringv1.PodMetricsEndpoint, i int, roleSelector bool) yaml.MapSlice {
	f := "spec.podMetricsEndpoints[" + strconv.Itoa(i) + "]"
	cfg := yaml.MapSlice{
		item("job_name", fmt.Sprintf("podMonitor/%s/%s/%d", m.Namespace, m.Name, i)),
		item("honor_labels", ep.HonorLabels),
	}
	cfg = boolItem(cfg, "honor_timestamps", ep.HonorTimestamps)
	cfg = boolItem(cfg, "track_timestamps_staleness", ep.TrackTimestampsStaleness)

	var roleSelectors []string
	if roleSelector {
		roleSelectors = []string{"pod"}
	}
	cfg = append(cfg, c.kubernetesSD("spec.selector", "pod", m.Spec.NamespaceSelector, m.Spec.AttachMetadata, roleSelectors, &m.Spec.Selector))
	cfg = c.endpointCommon(cfg, f, ep.Interval, ep.ScrapeTimeout, ep.Path, ep.Params, ep.Scheme)
	cfg = c.safeTLS(cfg, f+".tlsConfig", ep.TLSConfig)
	cfg = c.httpConfigWithoutTLS(cfg, f, ep.HTTPConfigWithoutTLS)
	cfg = c.proxy(cfg, f, ep.ProxyConfig)

	rl := initRelabelings()
	if ep.FilterRunning == nil || *ep.FilterRunning {
		rl = append(rl, runningFilter())
	}
	if !roleSelector {
		rl = append(rl, c.selectorRelabelings("spec.selector", "__meta_kubernetes_pod", m.Spec.Selector)...)
	}
	switch {
	case ep.Port != nil && *ep.Port != "":
		rl = append(rl, yaml.MapSlice{item("action", "keep"), item("source_labels", relabelKeys("__meta_kubernetes_pod_container_port_name")), item("regex", *ep.Port)})
	case ep.PortNumber != nil && *ep.PortNumber != 0:
		rl = append(rl, yaml.MapSlice{item("action", "keep"), item("source_labels", relabelKeys("__meta_kubernetes_pod_container_port_number")), item("regex", strconv.Itoa(int(*ep.PortNumber)))})
	case ep.TargetPort != nil && ep.TargetPort.StrVal != "": //nolint:staticcheck // deprecated but still part of the API
		rl = append(rl, yaml.MapSlice{item("action", "keep"), item("source_labels", relabelKeys("__meta_kubernetes_pod_container_port_name")), item("regex", ep.TargetPort.StrVal)}) //nolint:staticcheck
	case ep.TargetPort != nil && ep.TargetPort.IntVal != 0: //nolint:staticcheck
		rl = append(rl, yaml.MapSlice{item("action", "keep"), item("source_labels", relabelKeys("__meta_kubernetes_pod_container_port_number")), item("regex", ep.TargetPort.String())}) //nolint:staticcheck
	}
	rl = append(rl,
		copyRelabeling("__meta_kubernetes_namespace", "namespace"),
		copyRelabeling("__meta_kubernetes_pod_container_name", "container"),
		copyRelabeling("__meta_kubernetes_pod_name", "pod"),
	)
	for _, l := range m.Spec.PodTargetLabels {
		rl = append(rl, labelRelabeling("__meta_kubernetes_pod_label_"+sanitizeLabelName(l), sanitizeLabelName(l)))
	}
	rl = append(rl, yaml.MapSlice{item("target_label", "job"), item("replacement", m.Namespace+"/"+m.Name)})
	if m.Spec.JobLabel != "" {
		rl = append(rl, labelRelabeling("__meta_kubernetes_pod_label_"+sanitizeLabelName(m.Spec.JobLabel), "job"))
	}
	// Like the operator, the endpoint label comes from port, else from
	// targetPort, even when portNumber chose the port.
	switch {
	case ep.Port != nil && *ep.Port != "":
		rl = append(rl, yaml.MapSlice{item("target_label", "endpoint"), item("replacement", *ep.Port)})
	case ep.TargetPort != nil && ep.TargetPort.String() != "": //nolint:staticcheck
		rl = append(rl, yaml.MapSlice{item("target_label", "endpoint"), item("replacement", ep.TargetPort.String())}) //nolint:staticcheck
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
