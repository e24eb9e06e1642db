package monitors

import (
	"fmt"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"
)

// scrapeConfig generates the job scrapeConfig/<namespace>/<name>.
func (c *converter) scrapeConfig(sc *monitoringv1alpha1.ScrapeConfig) []yaml.MapSlice {
	s := &sc.Spec
	c.noScrapeClass(s.ScrapeClassName)
	cfg := yaml.MapSlice{item("job_name", fmt.Sprintf("scrapeConfig/%s/%s", sc.Namespace, sc.Name))}
	rl := initRelabelings()
	if s.JobName != nil {
		rl = append(rl, yaml.MapSlice{item("target_label", "job"), item("action", "replace"), item("replacement", *s.JobName)})
	}
	cfg = boolItem(cfg, "honor_timestamps", s.HonorTimestamps)
	cfg = boolItem(cfg, "track_timestamps_staleness", s.TrackTimestampsStaleness)
	cfg = boolItem(cfg, "honor_labels", s.HonorLabels)
	if s.MetricsPath != nil {
		cfg = kv(cfg, "metrics_path", *s.MetricsPath)
	}
	if len(s.Params) > 0 {
		cfg = kv(cfg, "params", s.Params)
	}
	cfg = boolItem(cfg, "enable_compression", s.EnableCompression)
	cfg = boolItem(cfg, "enable_http2", s.EnableHTTP2)
	if s.ScrapeInterval != nil {
		cfg = kv(cfg, "scrape_interval", string(*s.ScrapeInterval))
	}
	if s.ScrapeTimeout != nil {
		cfg = kv(cfg, "scrape_timeout", string(*s.ScrapeTimeout))
	}
	if s.Scheme != nil && *s.Scheme != "" {
		cfg = kv(cfg, "scheme", scheme(s.Scheme))
	}
	cfg = c.proxy(cfg, "spec", s.ProxyConfig)
	hc := monitoringv1.HTTPConfigWithoutTLS{BasicAuth: s.BasicAuth, Authorization: s.Authorization, OAuth2: s.OAuth2}
	cfg = c.httpConfigWithoutTLS(cfg, "spec", hc)
	cfg = c.safeTLS(cfg, "spec.tlsConfig", s.TLSConfig)
	cfg = c.monitorSettings(cfg, monitorSettings{
		limits: limits{s.SampleLimit, s.TargetLimit, s.LabelLimit, s.LabelNameLengthLimit, s.LabelValueLengthLimit, s.KeepDroppedTargets},
		native: s.NativeHistogramConfig, protocols: s.ScrapeProtocols, fallback: s.FallbackScrapeProtocol,
		extraMetrics: s.ExtraScrapeMetrics, bodySizeLimit: s.BodySizeLimit,
	})

	cfg = c.staticSD(cfg, s.StaticConfigs)
	cfg = c.fileSD(cfg, s.FileSDConfigs)
	cfg = c.httpSD(cfg, s.HTTPSDConfigs)
	cfg = c.kubernetesSDs(cfg, s.KubernetesSDConfigs)
	cfg = c.consulSD(cfg, s.ConsulSDConfigs)
	cfg = c.dnsSD(cfg, s.DNSSDConfigs)
	cfg = c.ec2SD(cfg, s.EC2SDConfigs)
	cfg = c.azureSD(cfg, s.AzureSDConfigs)
	cfg = c.gceSD(cfg, s.GCESDConfigs)
	cfg = c.openstackSD(cfg, s.OpenStackSDConfigs)
	cfg = c.moreSDs(cfg, s)
	cfg = c.nameSchemes(cfg, s.NameValidationScheme, s.NameEscapingScheme)

	rl = append(rl, c.relabelings("spec.relabelings", s.RelabelConfigs)...)
	cfg = kv(cfg, "relabel_configs", rl)
	if len(s.MetricRelabelConfigs) > 0 {
		cfg = kv(cfg, "metric_relabel_configs", c.relabelings("spec.metricRelabelings", s.MetricRelabelConfigs))
	}
	return []yaml.MapSlice{cfg}
}

// sdHTTP holds the HTTP client settings a discovery mechanism may carry.
type sdHTTP struct {
	basicAuth       *monitoringv1.BasicAuth
	authorization   *monitoringv1.SafeAuthorization
	oauth2          *monitoringv1.OAuth2
	proxy           monitoringv1.ProxyConfig
	followRedirects *bool
	enableHTTP2     *bool
	tls             *monitoringv1.SafeTLSConfig
}

func (c *converter) sdHTTP(m yaml.MapSlice, f string, h sdHTTP) yaml.MapSlice {
	m = c.httpConfigWithoutTLS(m, f, monitoringv1.HTTPConfigWithoutTLS{
		BasicAuth: h.basicAuth, Authorization: h.authorization, OAuth2: h.oauth2,
		FollowRedirects: h.followRedirects, EnableHTTP2: h.enableHTTP2,
	})
	m = c.proxy(m, f, h.proxy)
	return c.safeTLS(m, f+".tlsConfig", h.tls)
}

func refresh(m yaml.MapSlice, d *monitoringv1.Duration) yaml.MapSlice {
	if d == nil {
		return m
	}
	return kv(m, "refresh_interval", string(*d))
}

func port(m yaml.MapSlice, p *int32) yaml.MapSlice {
	if p == nil {
		return m
	}
	return kv(m, "port", int(*p))
}

func str(m yaml.MapSlice, key string, s *string) yaml.MapSlice {
	if s == nil {
		return m
	}
	return kv(m, key, *s)
}

func (c *converter) optSecret(m yaml.MapSlice, key, f string, s *corev1.SecretKeySelector) yaml.MapSlice {
	if s == nil {
		return m
	}
	return kv(m, key, c.secret(f, *s))
}

func (c *converter) staticSD(cfg yaml.MapSlice, scs []monitoringv1alpha1.StaticConfig) yaml.MapSlice {
	if len(scs) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(scs))
	for i, s := range scs {
		targets := make([]string, len(s.Targets))
		for j, t := range s.Targets {
			targets[j] = string(t)
		}
		out[i] = yaml.MapSlice{item("targets", targets)}
		if len(s.Labels) > 0 {
			out[i] = kv(out[i], "labels", s.Labels)
		}
	}
	return kv(cfg, "static_configs", out)
}

func (c *converter) fileSD(cfg yaml.MapSlice, fs []monitoringv1alpha1.FileSDConfig) yaml.MapSlice {
	if len(fs) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(fs))
	for i, s := range fs {
		files := make([]string, len(s.Files))
		for j, f := range s.Files {
			files[j] = string(f)
		}
		out[i] = refresh(yaml.MapSlice{item("files", files)}, s.RefreshInterval)
	}
	return kv(cfg, "file_sd_configs", out)
}

func (c *converter) httpSD(cfg yaml.MapSlice, hs []monitoringv1alpha1.HTTPSDConfig) yaml.MapSlice {
	if len(hs) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(hs))
	for i, s := range hs {
		f := fmt.Sprintf("spec.httpSDConfigs[%d]", i)
		m := yaml.MapSlice{item("url", string(s.URL))}
		m = refresh(m, s.RefreshInterval)
		out[i] = c.sdHTTP(m, f, sdHTTP{s.BasicAuth, s.Authorization, s.OAuth2, s.ProxyConfig, s.FollowRedirects, s.EnableHTTP2, s.TLSConfig})
	}
	return kv(cfg, "http_sd_configs", out)
}

func (c *converter) kubernetesSDs(cfg yaml.MapSlice, ks []monitoringv1alpha1.KubernetesSDConfig) yaml.MapSlice {
	if len(ks) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(ks))
	for i, s := range ks {
		f := fmt.Sprintf("spec.kubernetesSDConfigs[%d]", i)
		m := yaml.MapSlice{}
		m = str(m, "api_server", s.APIServer)
		role := strings.ToLower(string(s.Role))
		m = kv(m, "role", role)
		m = c.sdHTTP(m, f, sdHTTP{s.BasicAuth, s.Authorization, s.OAuth2, s.ProxyConfig, s.FollowRedirects, s.EnableHTTP2, s.TLSConfig})
		if s.Namespaces != nil {
			ns := yaml.MapSlice{item("names", s.Namespaces.Names)}
			ns = boolItem(ns, "own_namespace", s.Namespaces.IncludeOwnNamespace)
			m = kv(m, "namespaces", ns)
		}
		if len(s.Selectors) > 0 {
			sels := make([]yaml.MapSlice, len(s.Selectors))
			for j, sel := range s.Selectors {
				sels[j] = str(str(yaml.MapSlice{item("role", strings.ToLower(string(sel.Role)))}, "label", sel.Label), "field", sel.Field)
			}
			m = kv(m, "selectors", sels)
		}
		if s.AttachMetadata != nil {
			switch role {
			case "pod", "endpoints", "endpointslice":
				m = kv(m, "attach_metadata", yaml.MapSlice{item("node", s.AttachMetadata.Node != nil && *s.AttachMetadata.Node)})
			default:
				// The operator drops it with a warning; Prometheus ignores it.
				c.fail(f+".attachMetadata", fmt.Errorf("not supported for role %q", s.Role))
			}
		}
		out[i] = m
	}
	return kv(cfg, "kubernetes_sd_configs", out)
}

func (c *converter) consulSD(cfg yaml.MapSlice, cs []monitoringv1alpha1.ConsulSDConfig) yaml.MapSlice {
	if len(cs) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(cs))
	for i, s := range cs {
		f := fmt.Sprintf("spec.consulSDConfigs[%d]", i)
		m := yaml.MapSlice{item("server", s.Server)}
		m = str(m, "path_prefix", s.PathPrefix)
		m = c.optSecret(m, "token", f+".tokenRef", s.TokenRef)
		m = str(m, "datacenter", s.Datacenter)
		m = str(m, "namespace", s.Namespace)
		m = str(m, "partition", s.Partition)
		if s.Scheme != nil {
			m = kv(m, "scheme", scheme(s.Scheme))
		}
		if len(s.Services) > 0 {
			m = kv(m, "services", s.Services)
		}
		if len(s.Tags) > 0 {
			m = kv(m, "tags", s.Tags)
		}
		m = str(m, "tag_separator", s.TagSeparator)
		if len(s.NodeMeta) > 0 {
			m = kv(m, "node_meta", s.NodeMeta)
		}
		m = str(m, "filter", s.Filter)
		m = str(m, "health_filter", s.HealthFilter)
		m = boolItem(m, "allow_stale", s.AllowStale)
		m = refresh(m, s.RefreshInterval)
		out[i] = c.sdHTTP(m, f, sdHTTP{s.BasicAuth, s.Authorization, s.OAuth2, s.ProxyConfig, s.FollowRedirects, s.EnableHttp2, s.TLSConfig})
	}
	return kv(cfg, "consul_sd_configs", out)
}

func (c *converter) dnsSD(cfg yaml.MapSlice, ds []monitoringv1alpha1.DNSSDConfig) yaml.MapSlice {
	if len(ds) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(ds))
	for i, s := range ds {
		m := yaml.MapSlice{item("names", s.Names)}
		m = refresh(m, s.RefreshInterval)
		if s.Type != nil {
			m = kv(m, "type", string(*s.Type))
		}
		out[i] = port(m, s.Port)
	}
	return kv(cfg, "dns_sd_configs", out)
}

func (c *converter) ec2SD(cfg yaml.MapSlice, es []monitoringv1alpha1.EC2SDConfig) yaml.MapSlice {
	if len(es) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(es))
	for i, s := range es {
		f := fmt.Sprintf("spec.ec2SDConfigs[%d]", i)
		m := str(yaml.MapSlice{}, "region", s.Region)
		m = c.optSecret(m, "access_key", f+".accessKey", s.AccessKey)
		m = c.optSecret(m, "secret_key", f+".secretKey", s.SecretKey)
		m = str(m, "role_arn", s.RoleARN)
		m = port(m, s.Port)
		m = refresh(m, s.RefreshInterval)
		m = filters(m, s.Filters)
		out[i] = c.sdHTTP(m, f, sdHTTP{proxy: s.ProxyConfig, followRedirects: s.FollowRedirects, enableHTTP2: s.EnableHTTP2, tls: s.TLSConfig})
	}
	return kv(cfg, "ec2_sd_configs", out)
}

func (c *converter) azureSD(cfg yaml.MapSlice, as []monitoringv1alpha1.AzureSDConfig) yaml.MapSlice {
	if len(as) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(as))
	for i, s := range as {
		f := fmt.Sprintf("spec.azureSDConfigs[%d]", i)
		m := str(yaml.MapSlice{}, "environment", s.Environment)
		if s.AuthenticationMethod != nil {
			m = kv(m, "authentication_method", string(*s.AuthenticationMethod))
		}
		m = kv(m, "subscription_id", s.SubscriptionID)
		m = str(m, "tenant_id", s.TenantID)
		m = str(m, "client_id", s.ClientID)
		m = c.optSecret(m, "client_secret", f+".clientSecret", s.ClientSecret)
		m = str(m, "resource_group", s.ResourceGroup)
		m = refresh(m, s.RefreshInterval)
		m = port(m, s.Port)
		out[i] = c.sdHTTP(m, f, sdHTTP{s.BasicAuth, s.Authorization, s.OAuth2, s.ProxyConfig, s.FollowRedirects, s.EnableHTTP2, s.TLSConfig})
	}
	return kv(cfg, "azure_sd_configs", out)
}

func (c *converter) gceSD(cfg yaml.MapSlice, gs []monitoringv1alpha1.GCESDConfig) yaml.MapSlice {
	if len(gs) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(gs))
	for i, s := range gs {
		m := yaml.MapSlice{item("project", s.Project), item("zone", s.Zone)}
		m = str(m, "filter", s.Filter)
		m = refresh(m, s.RefreshInterval)
		m = port(m, s.Port)
		out[i] = str(m, "tag_separator", s.TagSeparator)
	}
	return kv(cfg, "gce_sd_configs", out)
}

func (c *converter) openstackSD(cfg yaml.MapSlice, os []monitoringv1alpha1.OpenStackSDConfig) yaml.MapSlice {
	if len(os) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(os))
	for i, s := range os {
		f := fmt.Sprintf("spec.openstackSDConfigs[%d]", i)
		m := yaml.MapSlice{item("role", strings.ToLower(string(s.Role))), item("region", s.Region)}
		if s.IdentityEndpoint != nil {
			m = kv(m, "identity_endpoint", string(*s.IdentityEndpoint))
		}
		m = str(m, "username", s.Username)
		m = str(m, "userid", s.UserID)
		m = c.optSecret(m, "password", f+".password", s.Password)
		m = str(m, "domain_name", s.DomainName)
		m = str(m, "domain_id", s.DomainID)
		m = str(m, "project_name", s.ProjectName)
		m = str(m, "project_id", s.ProjectID)
		m = str(m, "application_credential_name", s.ApplicationCredentialName)
		m = str(m, "application_credential_id", s.ApplicationCredentialID)
		m = c.optSecret(m, "application_credential_secret", f+".applicationCredentialSecret", s.ApplicationCredentialSecret)
		m = boolItem(m, "all_tenants", s.AllTenants)
		m = refresh(m, s.RefreshInterval)
		m = port(m, s.Port)
		if s.Availability != nil {
			m = kv(m, "availability", strings.ToLower(string(*s.Availability)))
		}
		out[i] = c.safeTLS(m, f+".tlsConfig", s.TLSConfig)
	}
	return kv(cfg, "openstack_sd_configs", out)
}
