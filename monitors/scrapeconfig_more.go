package monitors

import (
	"fmt"
	"slices"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"go.yaml.in/yaml/v2"
)

// The less common discovery mechanisms of the ScrapeConfig type. Each maps
// the API's camelCase fields onto Prometheus' snake_case ones, resolving
// the Secrets they name.

func sdList[T any](cfg yaml.MapSlice, key string, in []T, conv func(int, T) yaml.MapSlice) yaml.MapSlice {
	if len(in) == 0 {
		return cfg
	}
	out := make([]yaml.MapSlice, len(in))
	for i, s := range in {
		out[i] = conv(i, s)
	}
	return kv(cfg, key, out)
}

// filters renders discovery filters sorted by name, as the Prometheus
// Operator does, so that one object gives the operator's configuration
// whatever the order of its filters.
func filters(m yaml.MapSlice, fs monitoringv1alpha1.Filters) yaml.MapSlice {
	if len(fs) == 0 {
		return m
	}
	fs = slices.SortedStableFunc(slices.Values(fs), func(a, b monitoringv1alpha1.Filter) int { return strings.Compare(a.Name, b.Name) })
	out := make([]yaml.MapSlice, len(fs))
	for j, fl := range fs {
		out[j] = yaml.MapSlice{item("name", fl.Name), item("values", fl.Values)}
	}
	return kv(m, "filters", out)
}

func (c *converter) moreSDs(cfg yaml.MapSlice, s *monitoringv1alpha1.ScrapeConfigSpec) yaml.MapSlice {
	cfg = sdList(cfg, "digitalocean_sd_configs", s.DigitalOceanSDConfigs, func(i int, d monitoringv1alpha1.DigitalOceanSDConfig) yaml.MapSlice {
		m := port(refresh(yaml.MapSlice{}, d.RefreshInterval), d.Port)
		return c.sdHTTP(m, fmt.Sprintf("spec.digitalOceanSDConfigs[%d]", i), sdHTTP{nil, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "kuma_sd_configs", s.KumaSDConfigs, func(i int, d monitoringv1alpha1.KumaSDConfig) yaml.MapSlice {
		m := yaml.MapSlice{item("server", string(d.Server))}
		m = str(m, "client_id", d.ClientID)
		m = refresh(m, d.RefreshInterval)
		if d.FetchTimeout != nil {
			m = kv(m, "fetch_timeout", string(*d.FetchTimeout))
		}
		return c.sdHTTP(m, fmt.Sprintf("spec.kumaSDConfigs[%d]", i), sdHTTP{d.BasicAuth, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "eureka_sd_configs", s.EurekaSDConfigs, func(i int, d monitoringv1alpha1.EurekaSDConfig) yaml.MapSlice {
		m := refresh(yaml.MapSlice{item("server", string(d.Server))}, d.RefreshInterval)
		return c.sdHTTP(m, fmt.Sprintf("spec.eurekaSDConfigs[%d]", i), sdHTTP{d.BasicAuth, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "docker_sd_configs", s.DockerSDConfigs, func(i int, d monitoringv1alpha1.DockerSDConfig) yaml.MapSlice {
		m := port(yaml.MapSlice{item("host", d.Host)}, d.Port)
		m = str(m, "host_networking_host", d.HostNetworkingHost)
		m = boolItem(m, "match_first_network", d.MatchFirstNetwork)
		m = refresh(filters(m, d.Filters), d.RefreshInterval)
		return c.sdHTTP(m, fmt.Sprintf("spec.dockerSDConfigs[%d]", i), sdHTTP{d.BasicAuth, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "linode_sd_configs", s.LinodeSDConfigs, func(i int, d monitoringv1alpha1.LinodeSDConfig) yaml.MapSlice {
		m := port(str(yaml.MapSlice{}, "region", d.Region), d.Port)
		m = refresh(str(m, "tag_separator", d.TagSeparator), d.RefreshInterval)
		return c.sdHTTP(m, fmt.Sprintf("spec.linodeSDConfigs[%d]", i), sdHTTP{nil, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "hetzner_sd_configs", s.HetznerSDConfigs, func(i int, d monitoringv1alpha1.HetznerSDConfig) yaml.MapSlice {
		m := yaml.MapSlice{item("role", strings.ToLower(string(d.Role)))}
		m = refresh(port(m, d.Port), d.RefreshInterval)
		m = str(m, "label_selector", d.LabelSelector)
		return c.sdHTTP(m, fmt.Sprintf("spec.hetznerSDConfigs[%d]", i), sdHTTP{d.BasicAuth, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "nomad_sd_configs", s.NomadSDConfigs, func(i int, d monitoringv1alpha1.NomadSDConfig) yaml.MapSlice {
		m := boolItem(yaml.MapSlice{}, "allow_stale", d.AllowStale)
		m = refresh(str(m, "namespace", d.Namespace), d.RefreshInterval)
		m = kv(str(m, "region", d.Region), "server", string(d.Server))
		m = str(m, "tag_separator", d.TagSeparator)
		return c.sdHTTP(m, fmt.Sprintf("spec.nomadSDConfigs[%d]", i), sdHTTP{d.BasicAuth, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "dockerswarm_sd_configs", s.DockerSwarmSDConfigs, func(i int, d monitoringv1alpha1.DockerSwarmSDConfig) yaml.MapSlice {
		m := yaml.MapSlice{item("host", d.Host), item("role", strings.ToLower(string(d.Role)))}
		m = refresh(filters(port(m, d.Port), d.Filters), d.RefreshInterval)
		return c.sdHTTP(m, fmt.Sprintf("spec.dockerSwarmSDConfigs[%d]", i), sdHTTP{d.BasicAuth, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "puppetdb_sd_configs", s.PuppetDBSDConfigs, func(i int, d monitoringv1alpha1.PuppetDBSDConfig) yaml.MapSlice {
		m := yaml.MapSlice{item("url", string(d.URL)), item("query", d.Query)}
		m = boolItem(m, "include_parameters", d.IncludeParameters)
		m = port(refresh(m, d.RefreshInterval), d.Port)
		return c.sdHTTP(m, fmt.Sprintf("spec.puppetDBSDConfigs[%d]", i), sdHTTP{d.BasicAuth, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "lightsail_sd_configs", s.LightSailSDConfigs, func(i int, d monitoringv1alpha1.LightSailSDConfig) yaml.MapSlice {
		f := fmt.Sprintf("spec.lightSailSDConfigs[%d]", i)
		m := str(yaml.MapSlice{}, "region", d.Region)
		m = c.optSecret(m, "access_key", f+".accessKey", d.AccessKey)
		m = c.optSecret(m, "secret_key", f+".secretKey", d.SecretKey)
		m = str(str(m, "role_arn", d.RoleARN), "endpoint", d.Endpoint)
		m = port(refresh(m, d.RefreshInterval), d.Port)
		return c.sdHTTP(m, f, sdHTTP{d.BasicAuth, d.Authorization, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	cfg = sdList(cfg, "ovhcloud_sd_configs", s.OVHCloudSDConfigs, func(i int, d monitoringv1alpha1.OVHCloudSDConfig) yaml.MapSlice {
		f := fmt.Sprintf("spec.ovhcloudSDConfigs[%d]", i)
		m := yaml.MapSlice{
			item("application_key", d.ApplicationKey),
			item("application_secret", c.secret(f+".applicationSecret", d.ApplicationSecret)),
			item("consumer_key", c.secret(f+".consumerKey", d.ConsumerKey)),
		}
		switch d.Service {
		case monitoringv1alpha1.OVHServiceVPS:
			m = kv(m, "service", "vps")
		case monitoringv1alpha1.OVHServiceDedicatedServer:
			m = kv(m, "service", "dedicated_server")
		default:
			c.fail(f+".service", fmt.Errorf("unknown service %q", d.Service))
		}
		return refresh(str(m, "endpoint", d.Endpoint), d.RefreshInterval)
	})
	cfg = sdList(cfg, "scaleway_sd_configs", s.ScalewaySDConfigs, func(i int, d monitoringv1alpha1.ScalewaySDConfig) yaml.MapSlice {
		f := fmt.Sprintf("spec.scalewaySDConfigs[%d]", i)
		m := yaml.MapSlice{
			item("access_key", d.AccessKey),
			item("secret_key", c.secret(f+".secretKey", d.SecretKey)),
			item("project_id", d.ProjectID),
			item("role", strings.ToLower(string(d.Role))),
		}
		m = port(m, d.Port)
		if d.ApiURL != nil {
			m = kv(m, "api_url", string(*d.ApiURL))
		}
		m = str(str(m, "zone", d.Zone), "name_filter", d.NameFilter)
		if len(d.TagsFilter) > 0 {
			m = kv(m, "tags_filter", d.TagsFilter)
		}
		m = refresh(m, d.RefreshInterval)
		return c.sdHTTP(m, f, sdHTTP{proxy: d.ProxyConfig, followRedirects: d.FollowRedirects, enableHTTP2: d.EnableHTTP2, tls: d.TLSConfig})
	})
	cfg = sdList(cfg, "ionos_sd_configs", s.IonosSDConfigs, func(i int, d monitoringv1alpha1.IonosSDConfig) yaml.MapSlice {
		m := yaml.MapSlice{item("datacenter_id", d.DataCenterID)}
		m = refresh(port(m, d.Port), d.RefreshInterval)
		// authorization is a value in this API: an empty one is none, or it
		// would clash with oauth2.
		var authz *monitoringv1.SafeAuthorization
		if d.Authorization != (monitoringv1.SafeAuthorization{}) {
			authz = &d.Authorization
		}
		return c.sdHTTP(m, fmt.Sprintf("spec.ionosSDConfigs[%d]", i), sdHTTP{nil, authz, d.OAuth2, d.ProxyConfig, d.FollowRedirects, d.EnableHTTP2, d.TLSConfig})
	})
	return cfg
}

// nameSchemes renders the metric name validation and escaping schemes.
func (c *converter) nameSchemes(cfg yaml.MapSlice, v *monitoringv1.NameValidationSchemeOptions, e *monitoringv1.NameEscapingSchemeOptions) yaml.MapSlice {
	if v != nil {
		switch *v {
		case monitoringv1.UTF8NameValidationScheme, monitoringv1.LegacyNameValidationScheme:
			cfg = kv(cfg, "metric_name_validation_scheme", strings.ToLower(string(*v)))
		default:
			c.fail("spec.nameValidationScheme", fmt.Errorf("unknown scheme %q", *v))
		}
	}
	if e != nil {
		names := map[monitoringv1.NameEscapingSchemeOptions]string{
			monitoringv1.AllowUTF8NameEscapingScheme:   "allow-utf-8",
			monitoringv1.UnderscoresNameEscapingScheme: "underscores",
			monitoringv1.DotsNameEscapingScheme:        "dots",
			monitoringv1.ValuesNameEscapingScheme:      "values",
		}
		if n, ok := names[*e]; ok {
			cfg = kv(cfg, "metric_name_escaping_scheme", n)
		} else {
			c.fail("spec.nameEscapingScheme", fmt.Errorf("unknown scheme %q", *e))
		}
	}
	return cfg
}
