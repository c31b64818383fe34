{{/* The release's base name. */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; call with (dict "root" $ "component" "processor"). */}}
{{- define "sluice.labels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "sluice.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sluice.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image of a workload; call with (dict "root" $ "name" "sluice-processor"). */}}
{{- define "sluice.image" -}}
{{- printf "%s/%s:%s" .root.Values.image.registry .name (default .root.Chart.AppVersion .root.Values.image.tag) -}}
{{- end -}}

{{/* The Redis URL as an env value: from the Secret when one is named. */}}
{{- define "sluice.redisUrl" -}}
{{- if .Values.redis.existingSecret }}
valueFrom:
  secretKeyRef:
    name: {{ .Values.redis.existingSecret }}
    key: redis-url
{{- else }}
value: {{ .Values.redis.url | quote }}
{{- end }}
{{- end -}}

{{/* Extra settings as env, prefixed; call with (dict "prefix" "SLUICE_PROCESSOR_" "env" .Values.processor.env). */}}
{{- define "sluice.extraEnv" -}}
{{- range $k, $v := .env }}
- name: {{ printf "%s%s" $.prefix $k }}
  value: {{ $v | toString | quote }}
{{- end }}
{{- end -}}

{{/* Pod-level security: non-root, RuntimeDefault seccomp. */}}
{{- define "sluice.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
fsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container-level security: read-only root filesystem, no privilege, no capabilities. */}}
{{- define "sluice.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
privileged: false
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Probes on the admin port. */}}
{{- define "sluice.probes" -}}
livenessProbe:
  httpGet: {path: /live, port: admin}
  periodSeconds: 10
  failureThreshold: 3
readinessProbe:
  httpGet: {path: /ready, port: admin}
  periodSeconds: 5
  failureThreshold: 2
startupProbe:
  httpGet: {path: /live, port: admin}
  periodSeconds: 2
  failureThreshold: 30
{{- end -}}

{{/* Zone and node spread; call with (dict "root" $ "component" "processor"). */}}
{{- define "sluice.topologySpread" -}}
{{- if .root.Values.topologySpread.enabled }}
topologySpreadConstraints:
  - maxSkew: {{ .root.Values.topologySpread.maxSkew }}
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "sluice.selectorLabels" . | nindent 8 }}
  - maxSkew: {{ .root.Values.topologySpread.maxSkew }}
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "sluice.selectorLabels" . | nindent 8 }}
{{- end }}
{{- end -}}

{{/* Grace period: the service's own deadline plus the preStop pause and a margin. */}}
{{- define "sluice.grace" -}}
{{- add (div (int .) 1000) 15 -}}
{{- end -}}
