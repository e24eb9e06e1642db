{{/* Chart name. */}}
{{- define "shoal.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Full name: release name, plus the chart name unless the release name holds it. */}}
{{- define "shoal.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The headless Service: gossip peers find each other through it. */}}
{{- define "shoal.clusterServiceName" -}}
{{- printf "%s-cluster" (include "shoal.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "shoal.selectorLabels" -}}
app.kubernetes.io/name: {{ include "shoal.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "shoal.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "shoal.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "shoal.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "shoal.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding the gossip key, empty when there is none. */}}
{{- define "shoal.gossipSecretName" -}}
{{- if .Values.cluster.gossipKey.existingSecret -}}
{{- .Values.cluster.gossipKey.existingSecret -}}
{{- else if .Values.cluster.gossipKey.create -}}
{{- printf "%s-gossip" (include "shoal.fullname" .) -}}
{{- end -}}
{{- end -}}

{{/* Name of the Secret holding the gossip TLS certificate, empty without
gossip TLS. */}}
{{- define "shoal.gossipTLSSecretName" -}}
{{- if .Values.cluster.tls.enabled -}}
{{- if .Values.cluster.tls.certManager.enabled -}}
{{- printf "%s-gossip-tls" (include "shoal.fullname" .) -}}
{{- else if .Values.cluster.tls.existingSecret -}}
{{- .Values.cluster.tls.existingSecret -}}
{{- else -}}
{{- fail "cluster.tls.enabled needs cluster.tls.existingSecret or cluster.tls.certManager.enabled" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The DNS name gossip certificates carry and peers check: the value,
or with cert-manager the headless Service's name. */}}
{{- define "shoal.gossipTLSServerName" -}}
{{- if .Values.cluster.tls.serverName -}}
{{- .Values.cluster.tls.serverName -}}
{{- else if .Values.cluster.tls.certManager.enabled -}}
{{- printf "%s.%s.svc" (include "shoal.clusterServiceName" .) .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- define "shoal.replicas" -}}
{{- if .Values.autoscaling.enabled -}}{{ .Values.autoscaling.minReplicas }}{{- else -}}{{ .Values.controller.replicas }}{{- end -}}
{{- end -}}

{{/* --cluster.wait-for-size: the value, or the replica count when null (0
with a DaemonSet, whose size is the node count, unknown here). */}}
{{- define "shoal.waitForSize" -}}
{{- if and (kindIs "invalid" .Values.cluster.waitForSize) (eq .Values.controller.type "daemonset") -}}
0
{{- else if kindIs "invalid" .Values.cluster.waitForSize -}}
{{- include "shoal.replicas" . -}}
{{- else -}}
{{- .Values.cluster.waitForSize -}}
{{- end -}}
{{- end -}}

{{- define "shoal.clusterName" -}}
{{- default .Release.Name .Values.cluster.name -}}
{{- end -}}

{{/* Mount path of one Secret referenced by remoteWrite. */}}
{{- define "shoal.secretPath" -}}
/etc/shoal/secrets/{{ .name }}/{{ .key }}
{{- end -}}

{{/*
Every Secret remoteWrite refers to, as a dict name -> true, serialised
as YAML (helpers can only return strings).
*/}}
{{- define "shoal.remoteWriteSecrets" -}}
{{- $secrets := dict -}}
{{- range .Values.remoteWrite -}}
{{- $refs := list -}}
{{- if .basicAuth -}}{{- $refs = append $refs .basicAuth.passwordSecret -}}{{- end -}}
{{- $refs = append $refs .bearerTokenSecret -}}
{{- if .tls -}}{{- $refs = concat $refs (list .tls.caSecret .tls.certSecret .tls.keySecret) -}}{{- end -}}
{{- range $refs -}}
{{- if and . .name -}}{{- $_ := set $secrets .name true -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- toYaml $secrets -}}
{{- end -}}

{{/* Namespaces the default discovery looks at. */}}
{{- define "shoal.sdNamespaces" -}}
{{- if .Values.rbac.namespaced -}}
namespaces:
  names:
    - {{ .Release.Namespace }}
{{- end -}}
{{- end -}}

{{/* The Prometheus configuration file shoal runs with. */}}
{{- define "shoal.config" -}}
{{- if .Values.config.override -}}
{{- .Values.config.override -}}
{{- else -}}
global:
  scrape_interval: {{ .Values.config.scrapeInterval }}
  scrape_timeout: {{ .Values.config.scrapeTimeout }}
  {{- with .Values.config.externalLabels }}
  external_labels:
    {{- toYaml . | nindent 4 }}
  {{- end }}
scrape_configs:
{{- if .Values.config.scrapeSelf }}
  # shoal itself: every replica, sharded like any other target.
  - job_name: shoal
    kubernetes_sd_configs:
      - role: pod
        namespaces:
          names:
            - {{ .Release.Namespace }}
        selectors:
          - role: pod
            label: {{ printf "app.kubernetes.io/name=%s,app.kubernetes.io/instance=%s" (include "shoal.name" .) .Release.Name }}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_container_port_name]
        regex: http-metrics
        action: keep
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
{{- if eq .Values.controller.type "daemonset" }}
      # DaemonSet: the replica on the pod's node scrapes it.
      - target_label: __shoal_sharding__
        replacement: node-local
{{- end }}
{{- end }}
{{- if .Values.config.scrapeAnnotatedPods }}
  # Pods annotated prometheus.io/scrape: "true".
  - job_name: kubernetes-pods
    kubernetes_sd_configs:
      - role: pod
        {{- with include "shoal.sdNamespaces" . }}{{ . | nindent 8 }}{{ end }}
    relabel_configs:
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scrape]
        regex: "true"
        action: keep
      - source_labels: [__meta_kubernetes_pod_phase]
        regex: Pending|Succeeded|Failed|Completed
        action: drop
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_scheme]
        regex: (https?)
        target_label: __scheme__
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_path]
        regex: (.+)
        target_label: __metrics_path__
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
        regex: (\d+);(([A-Fa-f0-9]{1,4}::?){1,7}[A-Fa-f0-9]{1,4})
        replacement: "[$2]:$1"
        target_label: __address__
      - source_labels: [__meta_kubernetes_pod_annotation_prometheus_io_port, __meta_kubernetes_pod_ip]
        regex: (\d+);((([0-9]+?)(\.|$)){4})
        replacement: "$2:$1"
        target_label: __address__
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
{{- if eq .Values.controller.type "daemonset" }}
      # DaemonSet: the replica on the pod's node scrapes it.
      - target_label: __shoal_sharding__
        replacement: node-local
{{- end }}
{{- end }}
{{- if .Values.config.scrapeAnnotatedServices }}
  # Endpoints of services annotated prometheus.io/scrape: "true".
  - job_name: kubernetes-service-endpoints
    kubernetes_sd_configs:
      - role: endpointslice
        {{- with include "shoal.sdNamespaces" . }}{{ . | nindent 8 }}{{ end }}
    relabel_configs:
      - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scrape]
        regex: "true"
        action: keep
      - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_scheme]
        regex: (https?)
        target_label: __scheme__
      - source_labels: [__meta_kubernetes_service_annotation_prometheus_io_path]
        regex: (.+)
        target_label: __metrics_path__
      - source_labels: [__address__, __meta_kubernetes_service_annotation_prometheus_io_port]
        regex: (.+?)(?::\d+)?;(\d+)
        replacement: "$1:$2"
        target_label: __address__
      - source_labels: [__meta_kubernetes_namespace]
        target_label: namespace
      - source_labels: [__meta_kubernetes_service_name]
        target_label: service
      - source_labels: [__meta_kubernetes_pod_name]
        target_label: pod
{{- end }}
{{- with .Values.config.extraScrapeConfigs }}
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if and (not .Values.config.scrapeSelf) (not .Values.config.scrapeAnnotatedPods) (not .Values.config.scrapeAnnotatedServices) (not .Values.config.extraScrapeConfigs) }}
  []
{{- end }}
{{- with .Values.remoteWrite }}
remote_write:
{{- range . }}
  - url: {{ required "every remoteWrite entry needs a url" .url | quote }}
    {{- with .name }}
    name: {{ . | quote }}
    {{- end }}
    {{- with .headers }}
    headers:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .basicAuth }}
    basic_auth:
      username: {{ required "remoteWrite basicAuth needs a username" .username | quote }}
      password_file: {{ include "shoal.secretPath" (required "remoteWrite basicAuth needs a passwordSecret {name, key}" .passwordSecret) }}
    {{- end }}
    {{- with .bearerTokenSecret }}
    authorization:
      type: Bearer
      credentials_file: {{ include "shoal.secretPath" . }}
    {{- end }}
    {{- with .tls }}
    tls_config:
      {{- with .caSecret }}
      ca_file: {{ include "shoal.secretPath" . }}
      {{- end }}
      {{- with .certSecret }}
      cert_file: {{ include "shoal.secretPath" . }}
      {{- end }}
      {{- with .keySecret }}
      key_file: {{ include "shoal.secretPath" . }}
      {{- end }}
      {{- with .serverName }}
      server_name: {{ . | quote }}
      {{- end }}
      {{- if .insecureSkipVerify }}
      insecure_skip_verify: true
      {{- end }}
    {{- end }}
    {{- with .queueConfig }}
    queue_config:
      {{- toYaml . | nindent 6 }}
    {{- end }}
    {{- with .writeRelabelConfigs }}
    write_relabel_configs:
      {{- toYaml . | nindent 6 }}
    {{- end }}
{{- end }}
{{- end }}
{{- end -}}
{{- end -}}
