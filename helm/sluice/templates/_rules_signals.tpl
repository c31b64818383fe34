{{/*
Production signals beside the alerts of _rules.tpl: the cost per record and the freshness
of the outputs.

What each workload spends per record, live: its pods' own CPU (process_cpu_seconds_total,
librdkafka's threads included) over the records it handled, and the alert on a rise against
its own recent past at a comparable load (the cost per record falls as the load rises, so
a quiet night is not a regression). Call with (dict "root" $ "ns" "namespace=…" or "").
*/}}
{{- define "sluice.rules.cost" -}}
{{- $c := .root.Values.monitoring.alerts.costPerRecord -}}
{{- $ns := .ns -}}
- name: sluice.cost
  rules:
    {{- range $w := list (dict "name" "processor" "records" "sluice_processor_messages_total") (dict "name" "ingest" "records" "sluice_ingest_produced_records_total") }}
    - record: sluice:records_per_second:rate5m
      expr: sum by (namespace) (rate({{ $w.records }}{{ include "sluice.sel" (list $ns) }}[5m]))
      labels:
        workload: {{ $w.name }}
    - record: sluice:cpu_seconds_per_second:rate5m
      expr: sum by (namespace) (rate(process_cpu_seconds_total{{ include "sluice.sel" (list $ns) }}[5m]) and on (namespace, pod) sluice_{{ $w.name }}_ready{{ include "sluice.sel" (list $ns) }})
      labels:
        workload: {{ $w.name }}
    {{- end }}
    - record: sluice:cpu_us_per_record:rate5m
      expr: 1e6 * sluice:cpu_seconds_per_second:rate5m{{ include "sluice.sel" (list $ns) }} / on (namespace, workload) (sluice:records_per_second:rate5m{{ include "sluice.sel" (list $ns) }} > 0)
    - alert: SluiceCostPerRecordRising
      expr: |
        sluice:cpu_us_per_record:rate5m{{ include "sluice.sel" (list $ns) }}
          > {{ $c.rise }} * avg_over_time(sluice:cpu_us_per_record:rate5m{{ include "sluice.sel" (list $ns) }}[1h] offset {{ $c.baseline }})
        and on (namespace, workload)
          sluice:records_per_second:rate5m{{ include "sluice.sel" (list $ns) }} >= {{ $c.minRecordsPerSecond }}
        and on (namespace, workload)
          abs(sluice:records_per_second:rate5m{{ include "sluice.sel" (list $ns) }} / avg_over_time(sluice:records_per_second:rate5m{{ include "sluice.sel" (list $ns) }}[1h] offset {{ $c.baseline }}) - 1) <= {{ $c.comparableLoad }}
      for: {{ $c.for }}
      labels:
        severity: warning
      annotations:
        summary: "Sluice {{ "{{" }} $labels.workload {{ "}}" }} spends {{ "{{" }} $value | printf \"%.1f\" {{ "}}" }} CPU-µs per record, up on {{ $c.baseline }} ago"
        description: >-
          The {{ "{{" }} $labels.workload {{ "}}" }} pods in {{ "{{" }} $labels.namespace {{ "}}" }} have spent more than {{ $c.rise }}× the CPU per record they spent
          at the same hour {{ $c.baseline }} ago, at a load within {{ $c.comparableLoad | mulf 100 }}% of it, for {{ $c.for }}: a release, a setting
          or a change in the input made each record dearer. Profile a pod (the runbook says how) and compare with the
          previous release.
        {{- include "sluice.runbook" (list .root "SluiceCostPerRecordRising") | nindent 8 }}
{{- end -}}


{{/*
Freshness end to end: the age of a swap when a read_committed reader of the swaps topic can
first read it (the processors' sluice_processor_visible_age_seconds, from the block time to
the commit of its transaction or, without transactions, its acknowledgement), against an
objective, with multiwindow burn-rate alerts. Not sluice-lag's time lag, which is how far the
group is behind the input; this includes the ingest, the processing and the commit.
Call with (dict "root" $ "ns" "namespace=…" or "").
*/}}
{{- define "sluice.rules.freshness" -}}
{{- $f := .root.Values.monitoring.alerts.freshness -}}
{{- $sel := list .ns (printf "topic=%q" .root.Values.kafka.swapsTopic) -}}
{{- /* Prometheus 3 writes a bucket's bound as 5.0 where 2.x keeps the client's 5. */ -}}
{{- $le := printf "le=~%q" (printf "%v(\\.0)?" $f.objectiveSeconds) -}}
- name: sluice.freshness
  rules:
    {{- range $w := list (dict "name" "page" "speed" "Fast" "severity" "critical") (dict "name" "ticket" "speed" "Slow" "severity" "warning") }}
    {{- $win := get $f $w.name }}
    - alert: SluiceFreshnessBudgetBurn
      expr: |
        {{- range $i, $window := list $win.longWindow $win.shortWindow }}
        {{- if $i }}
        and
        {{- end }}
        (
          1 - sum by (namespace) (rate(sluice_processor_visible_age_seconds_bucket{{ include "sluice.sel" (append $sel $le) }}[{{ $window }}]))
            / sum by (namespace) (rate(sluice_processor_visible_age_seconds_count{{ include "sluice.sel" $sel }}[{{ $window }}]))
        ) > {{ $win.burnRate }} * (1 - {{ $f.target }})
        {{- end }}
      labels:
        severity: {{ $w.severity }}
        window: {{ $win.longWindow }}
      annotations:
        summary: "{{ $w.speed }} burn of the freshness budget of {{ $.root.Values.kafka.swapsTopic }}"
        description: >-
          In {{ "{{" }} $labels.namespace {{ "}}" }}, {{ "{{" }} $value | humanizePercentage {{ "}}" }} of the swaps that became readable on {{ $.root.Values.kafka.swapsTopic }}
          in the last {{ $win.longWindow }} were older than {{ $f.objectiveSeconds }} s (from their block), and more than {{ $win.burnRate }}× the budget
          in the last {{ $win.shortWindow }} too. The objective is {{ $f.objectiveSeconds }} s for {{ $f.target }} of swaps; at this rate a 30-day
          budget lasts {{ divf 720 $win.burnRate | printf "%.0f" }} h.
        {{- include "sluice.runbook" (list $.root "SluiceFreshnessBudgetBurn") | nindent 8 }}
    {{- end }}
{{- end -}}
