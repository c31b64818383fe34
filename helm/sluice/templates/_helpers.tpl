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

{{/* Where a Redis TLS Secret is mounted. */}}
{{- define "sluice.redisTlsDir" -}}/etc/sluice/redis-tls{{- end -}}

{{/* Fails the render on Redis settings that cannot work, naming them. */}}
{{- define "sluice.redisChecks" -}}
{{- $r := .Values.redis -}}
{{- if and $r.tls.clientCert (not $r.tls.secret) }}
{{- fail "redis.tls.clientCert needs redis.tls.secret: a Secret with tls.crt and tls.key (and ca.crt)" }}
{{- end }}
{{- if and $r.tls.secret (not $r.existingSecret) (not (hasPrefix "rediss://" $r.url)) }}
{{- fail (printf "redis.tls.secret is set but redis.url (%s) is not rediss://: use a rediss:// URL or remove the Secret" $r.url) }}
{{- end }}
{{- end -}}

{{/* Redis settings as env of a service that uses it; call with (dict "root" $ "prefix" "SLUICE_PROCESSOR_"). */}}
{{- define "sluice.redisEnv" -}}
{{- include "sluice.redisChecks" .root }}
{{- $r := .root.Values.redis -}}
- name: {{ .prefix }}REDIS_URL
  {{- include "sluice.redisUrl" .root | nindent 2 }}
- name: {{ .prefix }}REDIS_PREFIX
  value: {{ $r.prefix | quote }}
{{- if $r.tls.secret }}
- name: {{ .prefix }}REDIS_TLS_CA_FILE
  value: {{ printf "%s/ca.crt" (include "sluice.redisTlsDir" .root) | quote }}
{{- end }}
{{- if $r.tls.clientCert }}
- name: {{ .prefix }}REDIS_TLS_CERT_FILE
  value: {{ printf "%s/tls.crt" (include "sluice.redisTlsDir" .root) | quote }}
- name: {{ .prefix }}REDIS_TLS_KEY_FILE
  value: {{ printf "%s/tls.key" (include "sluice.redisTlsDir" .root) | quote }}
{{- end }}
{{- with $r.acl.secret }}
- name: {{ $.prefix }}REDIS_USERNAME
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: username, optional: true}
- name: {{ $.prefix }}REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ . }}, key: password}
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

{{/* Where a Kafka TLS Secret is mounted. */}}
{{- define "sluice.kafkaTlsDir" -}}/etc/sluice/kafka-tls{{- end -}}

{{/* Fails the render on Kafka security settings that cannot work, naming them. */}}
{{- define "sluice.kafkaSecurityChecks" -}}
{{- $k := .Values.kafka -}}
{{- if and $k.sasl.enabled (not $k.sasl.secret) }}
{{- fail "kafka.sasl.enabled needs kafka.sasl.secret: a Secret with the keys username and password" }}
{{- end }}
{{- if and $k.tls.clientCert (not $k.tls.secret) }}
{{- fail "kafka.tls.clientCert needs kafka.tls.secret: a Secret with tls.crt and tls.key (and ca.crt)" }}
{{- end }}
{{- if and $k.tls.secret (not $k.tls.enabled) }}
{{- fail "kafka.tls.secret is set but kafka.tls.enabled is false: enable TLS or remove the Secret" }}
{{- end }}
{{- end -}}

{{/* The Kafka security values as librdkafka properties, `key=value,…` (every Kafka client here takes these). */}}
{{- define "sluice.kafkaSecurityProperties" -}}
{{- $k := .Values.kafka -}}
{{- $p := list -}}
{{- if or $k.tls.enabled $k.sasl.enabled }}
{{- $p = append $p (printf "security.protocol=%s" (ternary (ternary "SASL_SSL" "SASL_PLAINTEXT" $k.tls.enabled) "SSL" $k.sasl.enabled)) }}
{{- end }}
{{- if $k.sasl.enabled }}
{{- $p = append $p (printf "sasl.mechanism=%s" $k.sasl.mechanism) }}
{{- end }}
{{- if $k.tls.secret }}
{{- $p = append $p (printf "ssl.ca.location=%s/ca.crt" (include "sluice.kafkaTlsDir" .)) }}
{{- end }}
{{- if $k.tls.clientCert }}
{{- $p = append $p (printf "ssl.certificate.location=%s/tls.crt" (include "sluice.kafkaTlsDir" .)) }}
{{- $p = append $p (printf "ssl.key.location=%s/tls.key" (include "sluice.kafkaTlsDir" .)) }}
{{- end }}
{{- join "," $p -}}
{{- end -}}

{{/* The security properties and kafka.properties, for the librdkafka clients (processor, ingest). */}}
{{- define "sluice.kafkaProperties" -}}
{{- $k := .Values.kafka -}}
{{- $p := compact (list (include "sluice.kafkaSecurityProperties" .)) -}}
{{- range $key := keys $k.properties | sortAlpha }}
{{- $p = append $p (printf "%s=%v" $key (get $k.properties $key)) }}
{{- end }}
{{- join "," $p -}}
{{- end -}}

{{/* Kafka settings as env of a service that talks to Kafka; call with (dict "root" $ "prefix" "SLUICE_PROCESSOR_"),
and "securityOnly" true for sluice-lag (its own client: librdkafka's tuning properties mean nothing to it). */}}
{{- define "sluice.kafkaEnv" -}}
{{- include "sluice.kafkaSecurityChecks" .root }}
{{- $props := include (ternary "sluice.kafkaSecurityProperties" "sluice.kafkaProperties" (default false .securityOnly)) .root }}
{{- if $props }}
- name: {{ .prefix }}KAFKA_PROPERTIES
  value: {{ $props | quote }}
{{- end }}
{{- with .root.Values.kafka.sasl }}
{{- if .enabled }}
- name: {{ $.prefix }}KAFKA_SASL_USERNAME
  valueFrom:
    secretKeyRef: {name: {{ .secret }}, key: username}
- name: {{ $.prefix }}KAFKA_SASL_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ .secret }}, key: password}
{{- end }}
{{- end }}
{{- end -}}

{{/* The TLS Secrets a service mounts: Kafka's unless "kafka" is false, Redis's unless "redis"
is false; call with (dict "root" $ "redis" false). Empty without one. */}}
{{- define "sluice.tlsSecrets" -}}
{{- $s := list -}}
{{- if and (or (not (hasKey . "kafka")) .kafka) .root.Values.kafka.tls.secret }}
{{- $s = append $s (list "kafka-tls" (include "sluice.kafkaTlsDir" .root) .root.Values.kafka.tls.secret) }}
{{- end }}
{{- if and (or (not (hasKey . "redis")) .redis) .root.Values.redis.tls.secret }}
{{- $s = append $s (list "redis-tls" (include "sluice.redisTlsDir" .root) .root.Values.redis.tls.secret) }}
{{- end }}
{{- toJson $s -}}
{{- end -}}

{{/* Their volume mounts (container) and volumes (pod); same arguments. */}}
{{- define "sluice.tlsMounts" -}}
{{- with (include "sluice.tlsSecrets" . | fromJsonArray) }}
volumeMounts:
  {{- range . }}
  - name: {{ index . 0 }}
    mountPath: {{ index . 1 }}
    readOnly: true
  {{- end }}
{{- end }}
{{- end -}}
{{- define "sluice.tlsVolumes" -}}
{{- with (include "sluice.tlsSecrets" . | fromJsonArray) }}
volumes:
  {{- range . }}
  - name: {{ index . 0 }}
    secret:
      secretName: {{ index . 2 }}
      defaultMode: 0440
  {{- end }}
{{- end }}
{{- end -}}

{{/* lag.groupSettings as SLUICE_LAG_GROUP_SETTINGS: `group: key=value key=value; group: …`. */}}
{{- define "sluice.lagGroupSettings" -}}
{{- $groups := list -}}
{{- range $group := keys . | sortAlpha }}
{{- $settings := get $ $group -}}
{{- $pairs := list -}}
{{- range $key := keys $settings | sortAlpha }}
{{- $pairs = append $pairs (printf "%s=%v" $key (get $settings $key)) }}
{{- end }}
{{- $groups = append $groups (printf "%s: %s" $group (join " " $pairs)) }}
{{- end }}
{{- join "; " $groups -}}
{{- end -}}

{{/* The Secret holding the scheduler's admin token: the user's, or the one the chart creates. */}}
{{- define "sluice.schedulerAdminSecret" -}}
{{- .Values.scheduler.adminTokenSecret | default (printf "%s-scheduler-admin" (include "sluice.fullname" .)) -}}
{{- end }}

{{/* Whether the processors scale through sluice-lag's external scaler (a trigger other than `kafka`). */}}
{{- define "sluice.externalScaler" -}}
{{- if and .Values.processor.autoscaling.enabled (ne .Values.processor.autoscaling.trigger "kafka") }}true{{ end -}}
{{- end -}}
