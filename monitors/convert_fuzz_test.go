package monitors_test

import (
	"bytes"
	"context"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	monitoringv1alpha1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1alpha1"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/config"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/shoal-dev/shoal/monitors"
)

// FuzzConvert feeds arbitrary objects of each kind to Convert. Whatever
// the input: no panic, the same bytes twice, and an object that converts
// yields a document Prometheus loads (a bad object must be rejected by
// Convert, never break the merged config).
func FuzzConvert(f *testing.F) {
	f.Add(uint8(0), `{metadata: {name: a, namespace: b}, spec: {endpoints: [{port: web, basicAuth: {username: {name: auth, key: user}, password: {name: auth, key: pass}}}]}}`)
	f.Add(uint8(1), `{metadata: {name: a, namespace: apps}, spec: {selector: {matchExpressions: [{key: k, operator: In, values: [x]}]}, podMetricsEndpoints: [{portNumber: 80, interval: 10s, scrapeTimeout: 5s}]}}`)
	f.Add(uint8(2), `{metadata: {name: a, namespace: b}, spec: {prober: {url: "bb:9115"}, targets: {ingress: {namespaceSelector: {any: true}}}}}`)
	f.Add(uint8(3), `{metadata: {name: a, namespace: b}, spec: {staticConfigs: [{targets: ["x:1"]}], consulSDConfigs: [{server: "c:8500"}], metricRelabelings: [{action: labeldrop, regex: "a.*"}]}}`)
	f.Add(uint8(0), `{metadata: {name: a, namespace: apps}, spec: {endpoints: [{port: p, tlsConfig: {ca: {configMap: {name: ca, key: ca.crt}}}, relabelings: [{action: hashmod, sourceLabels: [a], targetLabel: b, modulus: 3}]}]}}`)
	f.Fuzz(func(t *testing.T, kind uint8, doc string) {
		var objs monitors.Objects
		var err error
		switch kind % 4 {
		case 0:
			o := &monitoringv1.ServiceMonitor{}
			err = sigsyaml.Unmarshal([]byte(doc), o)
			objs.ServiceMonitors = append(objs.ServiceMonitors, o)
		case 1:
			o := &monitoringv1.PodMonitor{}
			err = sigsyaml.Unmarshal([]byte(doc), o)
			objs.PodMonitors = append(objs.PodMonitors, o)
		case 2:
			o := &monitoringv1.Probe{}
			err = sigsyaml.Unmarshal([]byte(doc), o)
			objs.Probes = append(objs.Probes, o)
		case 3:
			o := &monitoringv1alpha1.ScrapeConfig{}
			err = sigsyaml.Unmarshal([]byte(doc), o)
			objs.ScrapeConfigs = append(objs.ScrapeConfigs, o)
		}
		if err != nil {
			return
		}
		r := monitors.Convert(context.Background(), objs, testResolver, monitors.Options{})
		again := monitors.Convert(context.Background(), objs, testResolver, monitors.Options{})
		if !bytes.Equal(r.YAML(), again.YAML()) {
			t.Fatalf("two conversions differ:\n%s\n---\n%s", r.YAML(), again.YAML())
		}
		if len(r.Errors) > 0 {
			return
		}
		if _, err := config.Load(string(r.YAML()), promslog.NewNopLogger()); err != nil {
			t.Fatalf("converted without error, but Prometheus refuses the result: %v\n%s", err, r.YAML())
		}
	})
}
