{{/*
The alerting rules, as a Prometheus rule file's `groups:` (the PrometheusRule's
spec, and deploy/prometheus/sluice-rules.yaml rendered from the defaults).
Every expression aggregates by namespace. In the chart every selector also
matches the release's namespace (monitoring.alerts.releaseNamespaceOnly), so
releases with their own thresholds never judge each other's series; the plain
rule file leaves it out and serves every namespace.
*/}}
{{- define "sluice.rules" -}}
{{- $a := .Values.monitoring.alerts -}}
{{- $scale := .Values.processor.autoscaling -}}
{{- $lag := int $a.lag.threshold -}}
{{- if eq $lag 0 -}}
{{- $lag = mul (int $scale.lagThreshold) (int (ternary $scale.maxReplicas .Values.processor.replicas $scale.enabled)) -}}
{{- end -}}
{{- $windows := $a.schedulerJobNoSuccess.windowSecondsByJob -}}
{{- $ns := ternary (printf "namespace=%q" .Release.Namespace) "" $a.releaseNamespaceOnly -}}
{{- $g := printf "consumergroup=%q" .Values.processor.groupId -}}
{{- $tl := $a.timeLag -}}
groups:
{{- if .Values.lag.enabled }}
  # From sluice-lag: what Kafka says about the groups, whether or not their consumers run.
  - name: sluice.lag
    rules:
      - alert: SluiceConsumerLagHigh
        expr: |
          sum by (namespace, consumergroup, topic) (max by (namespace, consumergroup, topic, partition) (kafka_consumergroup_lag{{ include "sluice.sel" (list $ns $g) }})) > {{ $lag }}
        for: {{ $a.lag.for }}
        labels:
          severity: warning
        annotations:
          summary: "Sluice consumer lag on {{ "{{" }} $labels.topic {{ "}}" }} is {{ "{{" }} $value {{ "}}" }} records"
          description: >-
            The processors' lag on {{ "{{" }} $labels.topic {{ "}}" }} in {{ "{{" }} $labels.namespace {{ "}}" }} has stayed above {{ $lag }} records
            (the most they are sized for: lagThreshold × replicas) for {{ $a.lag.for }}. Check whether KEDA is at maxReplicas
            (more replicas than partitions cannot help), whether one partition holds the lag (a hot key),
            and the sink latency and retries panels (a slow downstream).
          {{- include "sluice.runbook" (list $ "SluiceConsumerLagHigh") | nindent 10 }}
      {{- range $w := list (dict "name" "page" "speed" "Fast" "severity" "critical") (dict "name" "ticket" "speed" "Slow" "severity" "warning") }}
      {{- $win := get $tl $w.name }}
      - alert: SluiceTimeLagBudgetBurn
        expr: |
          {{- range $i, $window := list $win.longWindow $win.shortWindow }}
          {{- if $i }}
          and
          {{- end }}
          avg_over_time((max by (namespace, consumergroup) (sluice_lag_group_time_lag_seconds{{ include "sluice.sel" (list $ns $g) }}) > bool {{ $tl.objectiveSeconds }})[{{ $window }}:])
            > {{ $win.burnRate }} * (1 - {{ $tl.target }})
          {{- end }}
        labels:
          severity: {{ $w.severity }}
          window: {{ $win.longWindow }}
        annotations:
          summary: "{{ $w.speed }} burn of the time-lag budget of {{ "{{" }} $labels.consumergroup {{ "}}" }}"
          description: >-
            The processors' group {{ "{{" }} $labels.consumergroup {{ "}}" }} in {{ "{{" }} $labels.namespace {{ "}}" }} was more than {{ $tl.objectiveSeconds }} s behind (its
            oldest unconsumed record older than that) for {{ "{{" }} $value | humanizePercentage {{ "}}" }} of the last {{ $win.longWindow }}, and for more than
            {{ $win.burnRate }}× its budget in the last {{ $win.shortWindow }} too. The objective is {{ $tl.objectiveSeconds }} s for {{ $tl.target }} of the time;
            at this rate a 30-day budget lasts {{ divf 720 $win.burnRate | printf "%.0f" }} h.
          {{- include "sluice.runbook" (list $ "SluiceTimeLagBudgetBurn") | nindent 10 }}
      {{- end }}
      - alert: SluiceLagPartitionStalled
        expr: |
          max by (namespace, consumergroup, topic, partition) (sluice_lag_partition_status{{ include "sluice.sel" (list $ns "status=~\"stall|stop\"") }}) == 1
        for: {{ $a.partitionStalled.for }}
        labels:
          severity: warning
        annotations:
          summary: "{{ "{{" }} $labels.consumergroup {{ "}}" }} stopped consuming {{ "{{" }} $labels.topic {{ "}}" }}/{{ "{{" }} $labels.partition {{ "}}" }}"
          description: >-
            sluice-lag has seen partition {{ "{{" }} $labels.partition {{ "}}" }} of {{ "{{" }} $labels.topic {{ "}}" }} in group {{ "{{" }} $labels.consumergroup {{ "}}" }}
            ({{ "{{" }} $labels.namespace {{ "}}" }}) STALL (owned, but its committed offset not moving while it has lag) or STOP
            (the same with no member owning it) for {{ $a.partitionStalled.for }}. `sluice-lag describe --group {{ "{{" }} $labels.consumergroup {{ "}}" }}` gives the status with its reason.
          {{- include "sluice.runbook" (list $ "SluiceLagPartitionStalled") | nindent 10 }}
      - alert: SluiceLagRetentionHeadroomLow
        expr: |
          min by (namespace, consumergroup, topic, partition) (sluice_lag_retention_headroom_seconds{{ include "sluice.sel" (list $ns) }}) < {{ $a.retention.headroomSeconds }}
        for: {{ $a.retention.for }}
        labels:
          severity: critical
        annotations:
          summary: "{{ "{{" }} $labels.consumergroup {{ "}}" }} will lose {{ "{{" }} $labels.topic {{ "}}" }}/{{ "{{" }} $labels.partition {{ "}}" }} records to retention in {{ "{{" }} $value | humanizeDuration {{ "}}" }}"
          description: >-
            The oldest record group {{ "{{" }} $labels.consumergroup {{ "}}" }} has not consumed on {{ "{{" }} $labels.topic {{ "}}" }}/{{ "{{" }} $labels.partition {{ "}}" }}
            ({{ "{{" }} $labels.namespace {{ "}}" }}) is deleted by retention in under {{ $a.retention.headroomSeconds }} s, unless the group catches up:
            then those records are lost to it.
          {{- include "sluice.runbook" (list $ "SluiceLagRetentionHeadroomLow") | nindent 10 }}
      - alert: SluiceLagRecordsLost
        expr: |
          max by (namespace, consumergroup, topic, partition) (sluice_lag_lost_records{{ include "sluice.sel" (list $ns) }}) > 0
        labels:
          severity: critical
        annotations:
          summary: "{{ "{{" }} $labels.consumergroup {{ "}}" }} lost {{ "{{" }} $value {{ "}}" }} records of {{ "{{" }} $labels.topic {{ "}}" }}/{{ "{{" }} $labels.partition {{ "}}" }} to retention"
          description: >-
            Group {{ "{{" }} $labels.consumergroup {{ "}}" }}'s committed offset on {{ "{{" }} $labels.topic {{ "}}" }}/{{ "{{" }} $labels.partition {{ "}}" }} ({{ "{{" }} $labels.namespace {{ "}}" }})
            is below the log start: retention deleted {{ "{{" }} $value {{ "}}" }} records it never read.
          {{- include "sluice.runbook" (list $ "SluiceLagRecordsLost") | nindent 10 }}
      - alert: SluiceProcessorsAbsent
        expr: |
          sum by (namespace, consumergroup) (max by (namespace, consumergroup, topic, partition) (kafka_consumergroup_lag{{ include "sluice.sel" (list $ns $g) }})) > 0
          unless on (namespace, consumergroup)
          max by (namespace, consumergroup) (kafka_consumergroup_members{{ include "sluice.sel" (list $ns $g) }}) > 0
        for: {{ $a.processorsAbsent.for }}
        labels:
          severity: critical
        annotations:
          summary: "No processor consumes {{ "{{" }} $labels.consumergroup {{ "}}" }}, which is {{ "{{" }} $value {{ "}}" }} records behind"
          description: >-
            The processors' group {{ "{{" }} $labels.consumergroup {{ "}}" }} in {{ "{{" }} $labels.namespace {{ "}}" }} has had no member for {{ $a.processorsAbsent.for }}
            while it has lag: nothing is being processed.
          {{- include "sluice.runbook" (list $ "SluiceProcessorsAbsent") | nindent 10 }}
      - alert: SluiceScalingBlocked
        expr: |
          max by (namespace, consumergroup) (sluice_lag_group_cause{{ include "sluice.sel" (list $ns "cause=\"blocked\"") }}) == 1
        for: {{ $a.scalingBlocked.for }}
        labels:
          severity: critical
        annotations:
          summary: "Every member of {{ "{{" }} $labels.consumergroup {{ "}}" }} stands still with lag: more consumers cannot help"
          description: >-
            sluice-lag has seen every member of group {{ "{{" }} $labels.consumergroup {{ "}}" }} ({{ "{{" }} $labels.namespace {{ "}}" }}) stand still for {{ $a.scalingBlocked.for }}:
            no partition with lag is consumed (STALL). All consumers stopping at once points at a dependency they share
            (Redis, the chain node). Sluice's scaler holds the processor count meanwhile (KEDA's kafka trigger does not:
            it keeps adding processors, which stop too); the lag drains when the dependency is back.
          {{- include "sluice.runbook" (list $ "SluiceScalingBlocked") | nindent 10 }}
      - alert: SluiceInputPartitionsDrift
        expr: |
          max by (namespace, topic) (kafka_topic_partitions{{ include "sluice.sel" (list $ns (printf "topic=%q" .Values.kafka.topic)) }}) != {{ int .Values.kafka.partitions }}
        for: {{ $a.partitionsDrift.for }}
        labels:
          severity: warning
        annotations:
          summary: "The input topic {{ "{{" }} $labels.topic {{ "}}" }} has {{ "{{" }} $value {{ "}}" }} partitions; the release is set for {{ .Values.kafka.partitions }}"
          description: >-
            kafka.partitions is {{ .Values.kafka.partitions }} and processor.autoscaling.maxReplicas {{ $scale.maxReplicas }}, checked against
            each other at install; the topic in {{ "{{" }} $labels.namespace {{ "}}" }} has {{ "{{" }} $value {{ "}}" }}. The scalers count the real partitions,
            but maxReplicas still caps the processors: with more partitions they cannot use them,
            with fewer the processors past the partition count sit idle.
          {{- include "sluice.runbook" (list $ "SluiceInputPartitionsDrift") | nindent 10 }}
      - alert: SluiceLagDown
        {{- /* The age of the last complete poll: sluice_lag_last_poll_timestamp_seconds moves with
             failed polls too. 60 s is twelve of the default 5 s polls. */}}
        expr: |
          min by (namespace) (time() - sluice_lag_last_complete_poll_timestamp_seconds{{ include "sluice.sel" (list $ns) }}) > 60
          or
          max by (namespace) (sluice_lag_ready{{ include "sluice.sel" (list $ns) }}) == 0
          or
          absent(sluice_lag_ready{{ include "sluice.sel" (list $ns) }})
        for: {{ $a.lagDown.for }}
        labels:
          severity: critical
        annotations:
          summary: "sluice-lag is not reading the cluster"
          description: >-
            sluice-lag has not completed a poll of Kafka for {{ $a.lagDown.for }} (or is not scraped at all): the lag panels
            and every lag alert are blind, and "no lag data" must not read as "no lag".
          {{- include "sluice.runbook" (list $ "SluiceLagDown") | nindent 10 }}
{{- end }}
  - name: sluice.processor
    rules:
      - alert: SluiceProcessorNotReady
        expr: |
          max by (namespace, pod) (sluice_processor_ready{{ include "sluice.sel" (list $ns) }}) == 0
        for: {{ $a.processorNotReady.for }}
        labels:
          severity: warning
        annotations:
          summary: "Sluice processor {{ "{{" }} $labels.pod {{ "}}" }} is not ready"
          description: >-
            {{ "{{" }} $labels.pod {{ "}}" }} in {{ "{{" }} $labels.namespace {{ "}}" }} has answered /ready with 503 for {{ $a.processorNotReady.for }}:
            it cannot reach Kafka or Redis, or has no assignment yet. Its /ready body names the reason.
          {{- include "sluice.runbook" (list $ "SluiceProcessorNotReady") | nindent 10 }}
      - alert: SluiceDeadLettersHigh
        expr: |
          sum by (namespace, kind) (rate(sluice_processor_dead_letters_total{{ include "sluice.sel" (list $ns) }}[5m])) > {{ $a.deadLetters.ratePerSecond }}
        for: {{ $a.deadLetters.for }}
        labels:
          severity: warning
        annotations:
          summary: "Sluice dead-letters {{ "{{" }} $value | humanize {{ "}}" }} records/s ({{ "{{" }} $labels.kind {{ "}}" }})"
          description: >-
            Records of kind {{ "{{" }} $labels.kind {{ "}}" }} go to the dead-letter topic faster than {{ $a.deadLetters.ratePerSecond }}/s
            in {{ "{{" }} $labels.namespace {{ "}}" }}. Each carries its reason in its headers: read a few from the DLQ topic.
            A producer-side schema change is the usual cause.
          {{- include "sluice.runbook" (list $ "SluiceDeadLettersHigh") | nindent 10 }}
      - alert: SluicePartitionPaused
        expr: |
          max by (namespace, pod, partition) (sluice_processor_partition_paused{{ include "sluice.sel" (list $ns) }}) == 1
        for: {{ $a.pausedPartitions.for }}
        labels:
          severity: warning
        annotations:
          summary: "Sluice partition {{ "{{" }} $labels.partition {{ "}}" }} paused on {{ "{{" }} $labels.pod {{ "}}" }}"
          description: >-
            Partition {{ "{{" }} $labels.partition {{ "}}" }} has been paused on {{ "{{" }} $labels.pod {{ "}}" }} for {{ $a.pausedPartitions.for }}.
            A processor pauses a partition while its in-flight budget is full or its records are stalled on a downstream
            outage (Redis, Kafka): work waits rather than being dropped. Check the retries and stalled-records panels.
          {{- include "sluice.runbook" (list $ "SluicePartitionPaused") | nindent 10 }}
      - alert: SluiceStateStoreReplaced
        expr: |
          max by (namespace, pod) (sluice_processor_state_store_replaced{{ include "sluice.sel" (list $ns) }} or sluice_scheduler_state_store_replaced{{ include "sluice.sel" (list $ns) }} or sluice_ingest_state_store_replaced{{ include "sluice.sel" (list $ns) }}) == 1
        for: 1m
        labels:
          severity: critical
        annotations:
          summary: "Sluice {{ "{{" }} $labels.pod {{ "}}" }} stopped writing: Redis is not the store its state is in"
          description: >-
            {{ "{{" }} $labels.pod {{ "}}" }} in {{ "{{" }} $labels.namespace {{ "}}" }} finds another generation marker in Redis, or none:
            Redis was reset or replaced. It writes nothing into it (a processor commits nothing that needs it, a scheduler
            runs no job, an ingest sends nothing) until the store is restored, or its state is rebuilt from Kafka.
          {{- include "sluice.runbook" (list $ "SluiceStateStoreReplaced") | nindent 10 }}
  - name: sluice.ingest
    rules:
      - alert: SluiceIngestCursorLost
        expr: |
          max by (namespace, pod) (sluice_ingest_cursor_lost{{ include "sluice.sel" (list $ns) }}) == 1
        for: 1m
        labels:
          severity: critical
        annotations:
          summary: "Sluice ingest {{ "{{" }} $labels.pod {{ "}}" }} stopped: Redis lost its cursor"
          description: >-
            {{ "{{" }} $labels.pod {{ "}}" }} in {{ "{{" }} $labels.namespace {{ "}}" }} finds no cursor in Redis while the topic holds records:
            Redis was reset or replaced. It sends nothing until the cursor is restored or LOST_CURSOR=resend is set.
          {{- include "sluice.runbook" (list $ "SluiceIngestCursorLost") | nindent 10 }}
  {{- include "sluice.rules.cost" (dict "root" $ "ns" $ns) | nindent 2 }}
  {{- include "sluice.rules.freshness" (dict "root" $ "ns" $ns) | nindent 2 }}
  - name: sluice.scheduler
    rules:
      {{- include "sluice.rules.noSuccessRule" (dict "root" $ "window" $a.schedulerJobNoSuccess.windowSeconds "ns" $ns "for" $a.schedulerJobNoSuccess.for "selector" (ternary "" (printf "job_name!~%q" (keys $windows | sortAlpha | join "|")) (empty $windows))) | nindent 6 }}
      {{- range $job := keys $windows | sortAlpha }}
      {{- include "sluice.rules.noSuccessRule" (dict "root" $ "window" (get $windows $job) "ns" $ns "for" $a.schedulerJobNoSuccess.for "selector" (printf "job_name=%q" $job) "job" $job) | nindent 6 }}
      {{- end }}
      - alert: SluiceSchedulerDown
        expr: |
          sum by (namespace) (sluice_scheduler_ready{{ include "sluice.sel" (list $ns) }}) == 0
          or
          absent(sluice_scheduler_ready{{ include "sluice.sel" (list $ns) }})
        for: {{ $a.schedulerDown.for }}
        labels:
          severity: critical
        annotations:
          summary: "No Sluice scheduler replica is ready"
          description: >-
            No scheduler replica has been ready for {{ $a.schedulerDown.for }} (or none is scraped at all): no scheduled job
            runs, and the job alerts above cannot see it. Check the scheduler pods and their /ready body (Redis).
          {{- include "sluice.runbook" (list $ "SluiceSchedulerDown") | nindent 10 }}
      - alert: SluiceSchedulerStaleWrites
        expr: |
          sum by (namespace, job_name) (increase(sluice_scheduler_stale_writes_rejected_total{{ include "sluice.sel" (list $ns) }}[10m])) > 0
        labels:
          severity: warning
        annotations:
          summary: "Sluice job {{ "{{" }} $labels.job_name {{ "}}" }}: writes with a stale fencing token"
          description: >-
            A run of {{ "{{" }} $labels.job_name {{ "}}" }} in {{ "{{" }} $labels.namespace {{ "}}" }} kept writing after it had lost its lease
            and the fence refused the writes (nothing was written twice). A replica paused longer than the lease
            (a CPU-starved or frozen pod, a slow Redis): check the scheduler's CPU limits and Redis latency.
          {{- include "sluice.runbook" (list $ "SluiceSchedulerStaleWrites") | nindent 10 }}
{{- end -}}

{{/* The SluiceSchedulerJobNoSuccess rule: for every job but those with their own window, or for "job" alone with its own; call with (dict "window" seconds "ns" … "for" … "selector" … ["job" name]). */}}
{{- define "sluice.rules.noSuccessRule" -}}
{{- $job := default (print "{{ $labels.job_name }}") .job -}}
- alert: SluiceSchedulerJobNoSuccess
  expr: |
    {{- include "sluice.rules.noSuccess" . | nindent 4 }}
  for: {{ .for }}
  labels:
    severity: critical
  annotations:
    summary: "Sluice job {{ "{{" }} $labels.job_name {{ "}}" }} has not succeeded in its window"
    description: >-
      The scheduler job {{ $job }} in {{ "{{" }} $labels.namespace {{ "}}" }} has no successful run in {{ if .job }}{{ .window }} s{{ else }}its window{{ end }}
      (or has ended runs and never succeeded); a paused job is left out. `sluice-scheduler admin runs {{ $job }}` lists its runs with their reasons.
    {{- include "sluice.runbook" (list .root "SluiceSchedulerJobNoSuccess") | nindent 4 }}
{{- end -}}

{{/* A job's newest success is older than the window, or it has ended runs and never succeeded, and it is not paused; call with (dict "window" seconds "ns" "namespace=…" "selector" "job_name=…"). */}}
{{- define "sluice.rules.noSuccess" -}}
{{- $sel := include "sluice.sel" (list .ns .selector) -}}
(
  time() - max by (namespace, job_name) (sluice_scheduler_last_success_timestamp_seconds{{ $sel }}) > {{ .window }}
  or
  (
    sum by (namespace, job_name) (sluice_scheduler_runs_total{{ include "sluice.sel" (list .ns .selector "outcome!=\"succeeded\"") }}) > 0
    or
    sum by (namespace, job_name) (sluice_scheduler_ticks_missed_total{{ $sel }}) > 0
  )
  unless on (namespace, job_name) sluice_scheduler_last_success_timestamp_seconds{{ $sel }}
)
unless on (namespace, job_name) (max by (namespace, job_name) (sluice_scheduler_paused{{ $sel }}) == 1)
{{- end -}}

{{/* An alert's runbook: its section of the chart's README; call with (list $ "AlertName"). */}}
{{- define "sluice.runbook" -}}
runbook_url: {{ printf "%s#%s" (index . 0).Values.monitoring.alerts.runbookUrl (lower (index . 1)) }}
{{- end -}}

{{/* A selector from the non-empty matchers of a list: `{a, b}`, or nothing. */}}
{{- define "sluice.sel" -}}
{{- $m := compact . -}}
{{- if $m }}{ {{- join ", " $m -}} }{{ end -}}
{{- end -}}
