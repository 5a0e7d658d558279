{{/* The objects' name: the release name, or "<release>-podns". */}}
{{- define "podns.fullname" -}}
{{- if contains "podns" .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-podns" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels of every podns pod of this release. */}}
{{- define "podns.selectorLabels" -}}
app.kubernetes.io/name: podns
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "podns.labels" -}}
{{ include "podns.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The workload's component label: forward-target or node-local. */}}
{{- define "podns.component" -}}
{{- if eq .Values.mode "daemonset" -}}node-local{{- else -}}forward-target{{- end -}}
{{- end -}}

{{/* The metrics Service's port (its targetPort is the pods' named port). */}}
{{- define "podns.adminPort" -}}
{{- if eq .Values.mode "daemonset" -}}{{ .Values.daemonset.adminPort }}{{- else -}}{{ .Values.forwardTarget.adminPort }}{{- end -}}
{{- end -}}

{{/* `podns serve` flags every workload shares (in daemonset mode the relays
and the node instances alike, so both answer the same). */}}
{{- define "podns.serveArgs" -}}
- --zone={{ join "," .Values.zones }}
- --publish={{ .Values.publish }}
- --hostnames={{ .Values.hostnames }}
- --duplicate-hostnames={{ .Values.duplicateHostnames }}
{{- if not .Values.rankView }}
- --no-rank-view
{{- end }}
{{- if not .Values.endpointSlices }}
- --no-endpoint-slices
{{- end }}
{{- range .Values.reverseCIDRs }}
- --reverse-cidr={{ . }}
{{- end }}
{{- range .Values.watchNamespaces }}
- --namespace={{ . }}
{{- end }}
{{- with .Values.labelSelector }}
- --label-selector={{ . }}
{{- end }}
{{- if .Values.adminDebug }}
- --admin-debug
{{- end }}
{{- range .Values.extraArgs }}
- {{ . }}
{{- end }}
{{- end -}}

{{/* The podns container's parts every workload shares (its env is
podns.env's, plus what the workload adds). */}}
{{- define "podns.containerCommon" -}}
image: {{ include "podns.image" . | quote }}
imagePullPolicy: {{ .Values.image.pullPolicy }}
# One slow or lost answer takes no replica out of its Service: three in a
# row (about 6 s) do. A pod that is shutting down leaves the Service at
# once either way (its endpoint turns terminating).
readinessProbe:
  httpGet:
    path: /readyz
    port: metrics
  periodSeconds: 2
  timeoutSeconds: 2
  failureThreshold: 3
livenessProbe:
  httpGet:
    path: /healthz
    port: metrics
  initialDelaySeconds: 5
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{/* podns's image: image.registry (when set) / image.repository : tag,
pinned by digest when one is given. */}}
{{- define "podns.image" -}}
{{- $repo := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repo = printf "%s/%s" (trimSuffix "/" .) $repo }}{{ end -}}
{{- include "podns.imageRef" (dict "image" (printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion)) "digest" .Values.image.digest) -}}
{{- end -}}

{{/* An image reference, pinned by digest when one is given; called with
(dict "image" "REPO:TAG" "digest" "sha256:…"). */}}
{{- define "podns.imageRef" -}}
{{- if .digest -}}{{ printf "%s@%s" .image .digest }}{{- else -}}{{ .image }}{{- end -}}
{{- end -}}

{{/* The podns container's env entries every workload has. */}}
{{- define "podns.env" -}}
# ns.dns.<zone> answers with the pod's own address (forward-target); the
# admin server listens on it (daemonset, the node's IP).
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: PODNS_LOG_FORMAT
  value: {{ .Values.logFormat }}
{{- end -}}

{{/* Pod annotations; called with (dict "root" $ "port" ADMIN_PORT). */}}
{{- define "podns.podAnnotations" -}}
prometheus.io/scrape: "true"
prometheus.io/port: {{ .port | quote }}
prometheus.io/path: /metrics
{{- with .root.Values.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The relays' Service address, which their certificate must name:
<fullname>.<namespace>.svc. */}}
{{- define "podns.relayHost" -}}
{{- printf "%s.%s.svc" (include "podns.fullname" .) .Release.Namespace -}}
{{- end -}}
