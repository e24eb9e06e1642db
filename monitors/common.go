package monitors

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/prometheus/prometheus/model/relabel"
	"go.yaml.in/yaml/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// converter converts one object. It keeps the first error with the path of
// the field that caused it, so that conversion code reads straight through.
type converter struct {
	ctx context.Context
	res Resolver
	src Source
	err *Error
}

func newConverter(ctx context.Context, res Resolver, src Source) *converter {
	return &converter{ctx: ctx, res: res, src: src}
}

func (c *converter) fail(field string, err error) {
	if c.err == nil {
		c.err = &Error{Source: c.src, Field: field, Err: err}
	}
}

func (c *converter) failed() bool { return c.err != nil }

func (c *converter) secret(field string, sel corev1.SecretKeySelector) string {
	if sel.Name == "" || sel.Key == "" {
		c.fail(field, errors.New("secret name and key are required"))
		return ""
	}
	if c.res == nil {
		c.fail(field, errors.New("no resolver for secrets"))
		return ""
	}
	v, err := c.res.SecretKey(c.ctx, c.src.Namespace, sel)
	if err != nil {
		c.fail(field, fmt.Errorf("secret %s/%s key %q: %w", c.src.Namespace, sel.Name, sel.Key, err))
	}
	return v
}

func (c *converter) secretOrConfigMap(field string, s monitoringv1.SecretOrConfigMap) string {
	switch {
	case s.Secret != nil && s.ConfigMap != nil:
		c.fail(field, errors.New("cannot name both a secret and a configMap"))
	case s.Secret != nil:
		return c.secret(field+".secret", *s.Secret)
	case s.ConfigMap != nil:
		sel := *s.ConfigMap
		if sel.Name == "" || sel.Key == "" {
			c.fail(field+".configMap", errors.New("configMap name and key are required"))
			return ""
		}
		if c.res == nil {
			c.fail(field, errors.New("no resolver for configMaps"))
			return ""
		}
		v, err := c.res.ConfigMapKey(c.ctx, c.src.Namespace, sel)
		if err != nil {
			c.fail(field+".configMap", fmt.Errorf("configMap %s/%s key %q: %w", c.src.Namespace, sel.Name, sel.Key, err))
		}
		return v
	}
	return ""
}

func item(k string, v any) yaml.MapItem { return yaml.MapItem{Key: k, Value: v} }

// kv appends an item to a mapping.
func kv(m yaml.MapSlice, k string, v any) yaml.MapSlice { return append(m, item(k, v)) }

// --- HTTP client settings -------------------------------------------------

func (c *converter) basicAuth(m yaml.MapSlice, field string, ba *monitoringv1.BasicAuth) yaml.MapSlice {
	if ba == nil {
		return m
	}
	return kv(m, "basic_auth", yaml.MapSlice{
		item("username", c.secret(field+".username", ba.Username)),
		item("password", c.secret(field+".password", ba.Password)),
	})
}

func (c *converter) safeAuthorization(m yaml.MapSlice, field string, a *monitoringv1.SafeAuthorization) yaml.MapSlice {
	if a == nil || reflect.ValueOf(*a).IsZero() {
		return m
	}
	if err := a.Validate(); err != nil {
		c.fail(field, err)
		return m
	}
	typ := strings.TrimSpace(a.Type)
	if typ == "" {
		typ = "Bearer"
	}
	return kv(m, "authorization", yaml.MapSlice{
		item("type", typ),
		item("credentials", c.secret(field+".credentials", *a.Credentials)),
	})
}

func (c *converter) bearerTokenSecret(m yaml.MapSlice, field string, s *corev1.SecretKeySelector) yaml.MapSlice {
	if s == nil || s.Name == "" {
		return m
	}
	return kv(m, "bearer_token", c.secret(field, *s))
}

func (c *converter) oauth2(m yaml.MapSlice, field string, o *monitoringv1.OAuth2) yaml.MapSlice {
	if o == nil {
		return m
	}
	if err := o.Validate(); err != nil {
		c.fail(field, err)
		return m
	}
	cfg := yaml.MapSlice{
		item("client_id", c.secretOrConfigMap(field+".clientId", o.ClientID)),
		item("client_secret", c.secret(field+".clientSecret", o.ClientSecret)),
		item("token_url", string(o.TokenURL)),
	}
	if len(o.Scopes) > 0 {
		cfg = kv(cfg, "scopes", o.Scopes)
	}
	if len(o.EndpointParams) > 0 {
		cfg = kv(cfg, "endpoint_params", o.EndpointParams)
	}
	cfg = c.proxy(cfg, field, o.ProxyConfig)
	cfg = c.safeTLS(cfg, field+".tlsConfig", o.TLSConfig)
	return kv(m, "oauth2", cfg)
}

func (c *converter) proxy(m yaml.MapSlice, field string, p monitoringv1.ProxyConfig) yaml.MapSlice {
	if reflect.ValueOf(p).IsZero() {
		return m
	}
	if err := p.Validate(); err != nil {
		c.fail(field, err)
		return m
	}
	if p.ProxyURL != nil {
		m = kv(m, "proxy_url", *p.ProxyURL)
	}
	if p.NoProxy != nil {
		m = kv(m, "no_proxy", *p.NoProxy)
	}
	if p.ProxyFromEnvironment != nil {
		m = kv(m, "proxy_from_environment", *p.ProxyFromEnvironment)
	}
	if len(p.ProxyConnectHeader) > 0 {
		h := yaml.MapSlice{}
		for _, k := range sortedKeys(p.ProxyConnectHeader) {
			var vals []string
			for i, sel := range p.ProxyConnectHeader[k] {
				vals = append(vals, c.secret(fmt.Sprintf("%s.proxyConnectHeader[%s][%d]", field, k, i), sel))
			}
			h = kv(h, k, vals)
		}
		m = kv(m, "proxy_connect_header", h)
	}
	return m
}

// tlsItems renders the secret-backed part of a TLS config, inline.
func (c *converter) tlsItems(field string, t *monitoringv1.SafeTLSConfig) yaml.MapSlice {
	cfg := yaml.MapSlice{}
	if err := t.Validate(); err != nil {
		c.fail(field, err)
		return cfg
	}
	if t.InsecureSkipVerify != nil {
		cfg = kv(cfg, "insecure_skip_verify", *t.InsecureSkipVerify)
	}
	var cert, key string
	if t.CA != (monitoringv1.SecretOrConfigMap{}) {
		ca := c.secretOrConfigMap(field+".ca", t.CA)
		if !c.failed() && !x509.NewCertPool().AppendCertsFromPEM([]byte(ca)) {
			c.fail(field+".ca", errors.New("no PEM certificate in the CA"))
		}
		cfg = kv(cfg, "ca", ca)
	}
	if t.Cert != (monitoringv1.SecretOrConfigMap{}) {
		cert = c.secretOrConfigMap(field+".cert", t.Cert)
		cfg = kv(cfg, "cert", cert)
	}
	if t.KeySecret != nil {
		key = c.secret(field+".keySecret", *t.KeySecret)
		cfg = kv(cfg, "key", key)
	}
	// Prometheus cannot build an HTTP client from material it cannot parse,
	// and fails the scrape pool or discoverer at reload: the object is
	// refused here instead, as the operator refuses it.
	if cert != "" && key != "" && !c.failed() {
		if _, err := tls.X509KeyPair([]byte(cert), []byte(key)); err != nil {
			c.fail(field+".cert", err)
		}
	}
	if t.ServerName != nil && *t.ServerName != "" {
		cfg = kv(cfg, "server_name", *t.ServerName)
	}
	if t.MinVersion != nil {
		cfg = kv(cfg, "min_version", string(*t.MinVersion))
	}
	if t.MaxVersion != nil {
		cfg = kv(cfg, "max_version", string(*t.MaxVersion))
	}
	return cfg
}

func (c *converter) safeTLS(m yaml.MapSlice, field string, t *monitoringv1.SafeTLSConfig) yaml.MapSlice {
	if t == nil {
		return m
	}
	return kv(m, "tls_config", c.tlsItems(field, t))
}

// tls renders a TLS config that may also name files. The files are paths in
// shoal's own container, as they are paths in Prometheus' for the operator.
func (c *converter) tls(m yaml.MapSlice, field string, t *monitoringv1.TLSConfig) yaml.MapSlice {
	if t == nil {
		return m
	}
	if err := t.Validate(); err != nil {
		c.fail(field, err)
		return m
	}
	cfg := c.tlsItems(field, &t.SafeTLSConfig)
	if t.CAFile != "" {
		cfg = kv(cfg, "ca_file", t.CAFile)
	}
	if t.CertFile != "" {
		cfg = kv(cfg, "cert_file", t.CertFile)
	}
	if t.KeyFile != "" {
		cfg = kv(cfg, "key_file", t.KeyFile)
	}
	return kv(m, "tls_config", cfg)
}

// httpConfigWithoutTLS renders authentication and the HTTP switches shared
// by monitors and probes.
func (c *converter) httpConfigWithoutTLS(m yaml.MapSlice, field string, h monitoringv1.HTTPConfigWithoutTLS) yaml.MapSlice {
	if err := h.Validate(); err != nil {
		c.fail(field, err)
		return m
	}
	if h.FollowRedirects != nil {
		m = kv(m, "follow_redirects", *h.FollowRedirects)
	}
	if h.EnableHTTP2 != nil {
		m = kv(m, "enable_http2", *h.EnableHTTP2)
	}
	m = c.oauth2(m, field+".oauth2", h.OAuth2)
	m = c.bearerTokenSecret(m, field+".bearerTokenSecret", h.BearerTokenSecret)
	m = c.basicAuth(m, field+".basicAuth", h.BasicAuth)
	m = c.safeAuthorization(m, field+".authorization", h.Authorization)
	return m
}

// --- relabelling ------------------------------------------------------------

func relabelKeys(sources ...string) []string { return sources }

// relabelings renders user relabel rules. Prometheus checks them when the
// job is parsed; here only what the API types allow but Prometheus cannot
// express is rejected.
func (c *converter) relabelings(field string, rcs []monitoringv1.RelabelConfig) []yaml.MapSlice {
	out := make([]yaml.MapSlice, 0, len(rcs))
	for i, rc := range rcs {
		r := yaml.MapSlice{}
		if len(rc.SourceLabels) > 0 {
			ls := make([]string, len(rc.SourceLabels))
			for j, l := range rc.SourceLabels {
				ls[j] = string(l)
			}
			r = kv(r, "source_labels", ls)
		}
		if rc.Separator != nil {
			r = kv(r, "separator", *rc.Separator)
		}
		if rc.TargetLabel != "" {
			r = kv(r, "target_label", rc.TargetLabel)
		}
		// A regex equal to the default is not written: Prometheus checks
		// keepequal and dropequal rules against its compiled default by
		// identity, and would refuse one that spells the default out.
		if rc.Regex != "" && rc.Regex != relabel.DefaultRelabelConfig.Regex.String() {
			if _, err := regexp.Compile("^(?s:" + rc.Regex + ")$"); err != nil {
				c.fail(fmt.Sprintf("%s[%d].regex", field, i), err)
			}
			r = kv(r, "regex", rc.Regex)
		}
		if rc.Modulus < 0 {
			c.fail(fmt.Sprintf("%s[%d].modulus", field, i), errors.New("must not be negative"))
		} else if rc.Modulus != 0 {
			r = kv(r, "modulus", uint64(rc.Modulus))
		}
		if rc.Replacement != nil {
			r = kv(r, "replacement", *rc.Replacement)
		}
		if rc.Action != "" {
			r = kv(r, "action", strings.ToLower(rc.Action))
		}
		out = append(out, r)
	}
	return out
}

// initRelabelings keeps the job label a target brings from discovery, as
// the operator does, before the job label is rewritten.
func initRelabelings() []yaml.MapSlice {
	return []yaml.MapSlice{{
		item("source_labels", relabelKeys("job")),
		item("target_label", "__tmp_prometheus_job_name"),
	}}
}

// selectorRelabelings turns a label selector into keep/drop rules on the
// discovered object's labels; prefix is e.g. "__meta_kubernetes_service".
func (c *converter) selectorRelabelings(field, prefix string, sel metav1.LabelSelector) []yaml.MapSlice {
	var out []yaml.MapSlice
	for _, k := range sortedKeys(sel.MatchLabels) {
		out = append(out, yaml.MapSlice{
			item("action", "keep"),
			item("source_labels", relabelKeys(prefix+"_label_"+sanitizeLabelName(k), prefix+"_labelpresent_"+sanitizeLabelName(k))),
			item("regex", "("+sel.MatchLabels[k]+");true"),
		})
	}
	for i, e := range sel.MatchExpressions {
		name := sanitizeLabelName(e.Key)
		switch e.Operator {
		case metav1.LabelSelectorOpIn, metav1.LabelSelectorOpNotIn:
			action := "keep"
			if e.Operator == metav1.LabelSelectorOpNotIn {
				action = "drop"
			}
			out = append(out, yaml.MapSlice{
				item("action", action),
				item("source_labels", relabelKeys(prefix+"_label_"+name, prefix+"_labelpresent_"+name)),
				item("regex", "("+strings.Join(e.Values, "|")+");true"),
			})
		case metav1.LabelSelectorOpExists, metav1.LabelSelectorOpDoesNotExist:
			action := "keep"
			if e.Operator == metav1.LabelSelectorOpDoesNotExist {
				action = "drop"
			}
			out = append(out, yaml.MapSlice{
				item("action", action),
				item("source_labels", relabelKeys(prefix+"_labelpresent_"+name)),
				item("regex", "true"),
			})
		default:
			c.fail(fmt.Sprintf("%s.matchExpressions[%d].operator", field, i), fmt.Errorf("unknown operator %q", e.Operator))
		}
	}
	return out
}

// labelRelabeling copies a discovered label onto the target when non-empty.
func labelRelabeling(source, target string) yaml.MapSlice {
	return yaml.MapSlice{
		item("source_labels", relabelKeys(source)),
		item("target_label", target),
		item("regex", "(.+)"),
		item("replacement", "${1}"),
	}
}

func copyRelabeling(source, target string) yaml.MapSlice {
	return yaml.MapSlice{
		item("source_labels", relabelKeys(source)),
		item("target_label", target),
	}
}

func runningFilter() yaml.MapSlice {
	return yaml.MapSlice{
		item("action", "drop"),
		item("source_labels", relabelKeys("__meta_kubernetes_pod_phase")),
		item("regex", "(Failed|Succeeded)"),
	}
}

var invalidLabelChars = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// sanitizeLabelName turns a Kubernetes label key into the suffix Prometheus'
// Kubernetes discovery uses for it.
func sanitizeLabelName(name string) string {
	return invalidLabelChars.ReplaceAllString(name, "_")
}

// --- Kubernetes discovery ---------------------------------------------------

// namespaces returns the namespaces a monitor's namespaceSelector selects;
// nil means all namespaces.
func namespaces(sel monitoringv1.NamespaceSelector, own string) []string {
	switch {
	case sel.Any:
		return nil
	case len(sel.MatchNames) == 0:
		return []string{own}
	}
	return sel.MatchNames
}

// kubernetesSD renders a kubernetes_sd_configs list with one entry.
func (c *converter) kubernetesSD(field, role string, nsSel monitoringv1.NamespaceSelector, attach *monitoringv1.AttachMetadata, roleSelectors []string, sel *metav1.LabelSelector) yaml.MapItem {
	sd := yaml.MapSlice{item("role", role)}
	if ns := namespaces(nsSel, c.src.Namespace); len(ns) > 0 {
		sd = kv(sd, "namespaces", yaml.MapSlice{item("names", ns)})
	}
	if attach != nil {
		sd = kv(sd, "attach_metadata", yaml.MapSlice{item("node", attach.Node != nil && *attach.Node)})
	}
	if len(roleSelectors) > 0 {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil {
			c.fail(field, err)
		}
		var sels []yaml.MapSlice
		for _, r := range roleSelectors {
			sels = append(sels, yaml.MapSlice{item("role", r), item("label", s.String())})
		}
		sd = kv(sd, "selectors", sels)
	}
	return item("kubernetes_sd_configs", []yaml.MapSlice{sd})
}

// useRoleSelector reports whether a monitor filters with discovery
// selectors (RoleSelector) rather than relabel rules (the default).
func (c *converter) useRoleSelector(field string, m *monitoringv1.SelectorMechanism) bool {
	if m == nil {
		return false
	}
	switch *m {
	case monitoringv1.SelectorMechanismRelabel:
		return false
	case monitoringv1.SelectorMechanismRole:
		return true
	}
	c.fail(field, fmt.Errorf("unknown selector mechanism %q", *m))
	return false
}

// --- scrape settings ----------------------------------------------------------

type limits struct {
	sample, target, label, labelName, labelValue, keepDropped *int64
}

func (c *converter) limits(m yaml.MapSlice, l limits) yaml.MapSlice {
	for _, f := range []struct {
		key, field string
		v          *int64
	}{
		{"sample_limit", "spec.sampleLimit", l.sample},
		{"target_limit", "spec.targetLimit", l.target},
		{"label_limit", "spec.labelLimit", l.label},
		{"label_name_length_limit", "spec.labelNameLengthLimit", l.labelName},
		{"label_value_length_limit", "spec.labelValueLengthLimit", l.labelValue},
		{"keep_dropped_targets", "spec.keepDroppedTargets", l.keepDropped},
	} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 {
			c.fail(f.field, errors.New("must not be negative"))
			continue
		}
		m = kv(m, f.key, uint64(*f.v))
	}
	return m
}

func (c *converter) nativeHistograms(m yaml.MapSlice, n monitoringv1.NativeHistogramConfig) yaml.MapSlice {
	if n.ScrapeNativeHistograms != nil {
		m = kv(m, "scrape_native_histograms", *n.ScrapeNativeHistograms)
	}
	if n.NativeHistogramBucketLimit != nil {
		if *n.NativeHistogramBucketLimit < 0 {
			c.fail("spec.nativeHistogramBucketLimit", errors.New("must not be negative"))
		} else {
			m = kv(m, "native_histogram_bucket_limit", uint64(*n.NativeHistogramBucketLimit))
		}
	}
	if n.NativeHistogramMinBucketFactor != nil {
		m = kv(m, "native_histogram_min_bucket_factor", n.NativeHistogramMinBucketFactor.AsApproximateFloat64())
	}
	if n.ScrapeClassicHistograms != nil {
		m = kv(m, "always_scrape_classic_histograms", *n.ScrapeClassicHistograms)
	}
	if n.ConvertClassicHistogramsToNHCB != nil {
		m = kv(m, "convert_classic_histograms_to_nhcb", *n.ConvertClassicHistogramsToNHCB)
	}
	return m
}

func protocols(m yaml.MapSlice, ps []monitoringv1.ScrapeProtocol, fallback *monitoringv1.ScrapeProtocol) yaml.MapSlice {
	if len(ps) > 0 {
		s := make([]string, len(ps))
		for i, p := range ps {
			s[i] = string(p)
		}
		m = kv(m, "scrape_protocols", s)
	}
	if fallback != nil {
		m = kv(m, "fallback_scrape_protocol", string(*fallback))
	}
	return m
}

func boolItem(m yaml.MapSlice, key string, b *bool) yaml.MapSlice {
	if b == nil {
		return m
	}
	return kv(m, key, *b)
}

func (c *converter) noScrapeClass(name *string) {
	if name != nil && *name != "" {
		c.fail("spec.scrapeClass", fmt.Errorf("scrape class %q: scrape classes are defined on a Prometheus resource, which shoal does not read", *name))
	}
}

func scheme(s *monitoringv1.Scheme) string { return strings.ToLower(string(*s)) }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
