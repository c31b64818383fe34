{{- /*
Replica counts the HPA can apply to the processors, and the behavior the chart renders.

A consumer group spreads kafka.partitions over its members, so some member holds
ceil(P / n); a count that leaves that maximum where a smaller count has it relieves no
one and costs a rebalance. The useful counts for 12 partitions are 1, 2, 3, 4, 6, 12.
The scaler asks only for those (KEDA's kafka trigger with ensureEvenDistributionOfPartitions:
a divisor), and a behavior policy limits a step to a count from the count at the start of its
period: if every policy lands a useful count from every useful count, nothing else is ever
applied. services/scaling/src/landing.rs does the same arithmetic; its tests replay the
chart's values through the HPA's engine, and helm/tests/test_chart.py holds the two together.
*/ -}}

{{- /* ",1,2,3,4,6,12,": the useful counts for the given partitions, ceil(P / ceil(P / n)). */ -}}
{{- define "sluice.usefulCounts" -}}
{{- $p := int . -}}
{{- $out := list -}}
{{- range $i := until $p -}}
{{- $most := div (add $p $i) (add1 $i) -}}
{{- $out = append $out (div (add $p (sub $most 1)) $most) -}}
{{- end -}}
{{- printf ",%s," (uniq $out | join ",") -}}
{{- end -}}

{{- /* processor.autoscaling.behavior as rendered: a direction without policies gets the derived
ones, which never limit a step within the bounds (scale-up: as many pods per 15 s as the group
can have; scale-down: 100 % per 15 s, the API server's own default), so the pace is the
stabilization windows' and the scaler's. `behavior: null` renders none: the HPA's own limits. */ -}}
{{- define "sluice.behavior" -}}
{{- $a := .Values.processor.autoscaling -}}
{{- if kindIs "map" $a.behavior -}}
{{- $b := deepCopy $a.behavior -}}
{{- $most := max (int .Values.kafka.partitions) (int $a.maxReplicas) 1 -}}
{{- $derived := dict "scaleUp" (dict "type" "Pods" "value" $most "periodSeconds" 15) "scaleDown" (dict "type" "Percent" "value" 100 "periodSeconds" 15) -}}
{{- range $dir, $policy := $derived -}}
{{- $rules := get $b $dir | default dict -}}
{{- if not (hasKey $rules "policies") -}}
{{- $_ := set $rules "policies" (list $policy) -}}
{{- end -}}
{{- $_ := set $b $dir $rules -}}
{{- end -}}
{{- toYaml $b -}}
{{- end -}}
{{- end -}}

{{- /* The counts one limit can land on from a count ("5" or "28,29"): a Percent limit that is a
whole number may come out one off in the controller's float64 arithmetic unless the value is a
multiple of 25. dict "policy" "from" "up"; policy type "Default" is the HPA's limit without a
behavior, max(2 × current, 4). */ -}}
{{- define "sluice.policyLimits" -}}
{{- $s := int .from -}}
{{- $v := int (.policy.value | default 0) -}}
{{- if eq .policy.type "Default" -}}
{{- max (mul 2 $s) 4 -}}
{{- else if eq .policy.type "Pods" -}}
{{- if .up }}{{ add $s $v }}{{ else }}{{ sub $s $v }}{{ end -}}
{{- else if .up -}}
{{- $product := mul $s (add 100 $v) -}}
{{- div (add $product 99) 100 -}}
{{- if and (eq (mod $product 100) 0) (ne (mod $v 25) 0) }},{{ add1 (div $product 100) }}{{ end -}}
{{- else -}}
{{- $product := mul $s (sub 100 $v) -}}
{{- div $product 100 -}}
{{- if and (eq (mod $product 100) 0) (ne (mod $v 25) 0) }},{{ sub (div $product 100) 1 }}{{ end -}}
{{- end -}}
{{- end -}}

{{- /* {"problems": [...], "reach": [...]}: what could make the HPA apply a count that relieves no
processor, and every count in [max(minReplicas, 1), maxReplicas] it can apply. The bounds are
checked as settings of their own (a limit past a bound stops at it), and counts above the
partitions are left to allowMoreReplicasThanPartitions. */ -}}
{{- define "sluice.replicaCounts" -}}
{{- $a := .Values.processor.autoscaling -}}
{{- $p := int .Values.kafka.partitions -}}
{{- $useful := include "sluice.usefulCounts" $p -}}
{{- $lo := max 1 (int $a.minReplicas) | int -}}
{{- $hi := int $a.maxReplicas -}}
{{- $fine := dict -}}
{{- range $n := untilStep $lo (int (add1 $hi)) 1 -}}
{{- if or (gt $n $p) (contains (printf ",%d," $n) $useful) -}}
{{- $_ := set $fine (toString $n) true -}}
{{- end -}}
{{- end -}}
{{- $problems := list -}}
{{- range $name, $n := dict "minReplicas" (int $a.minReplicas) "maxReplicas" $hi "fallback.replicas" (int $a.fallback.replicas) -}}
{{- if and (gt $n 0) (le $n $p) (not (contains (printf ",%d," $n) $useful)) -}}
{{- $problems = append $problems (printf "%s is %d" $name $n) -}}
{{- end -}}
{{- end -}}
{{- if not (include "sluice.externalScaler" $) -}}
{{- if not $a.ensureEvenDistributionOfPartitions -}}
{{- $problems = append $problems "ensureEvenDistributionOfPartitions is false: KEDA's kafka trigger then asks for ceil(lag / lagThreshold) processors, any count" -}}
{{- end -}}
{{- if $a.limitToPartitionsWithLag -}}
{{- $problems = append $problems "limitToPartitionsWithLag caps KEDA's count at the number of partitions with lag, any count" -}}
{{- end -}}
{{- end -}}
{{- $b := include "sluice.behavior" . | fromYaml -}}
{{- $directions := list -}}
{{- if $b -}}
{{- range $dir := list "scaleUp" "scaleDown" -}}
{{- $rules := get $b $dir -}}
{{- if ne (toString $rules.selectPolicy) "Disabled" -}}
{{- $directions = append $directions (dict "label" (printf "behavior.%s" $dir) "up" (eq $dir "scaleUp") "policies" ($rules.policies | default list)) -}}
{{- end -}}
{{- end -}}
{{- else -}}
{{- $directions = list (dict "label" "behavior: null (the HPA's own scale-up limit)" "up" true "policies" (list (dict "type" "Default"))) -}}
{{- end -}}
{{- range $d := $directions -}}
{{- range $policy := $d.policies -}}
{{- $found := "" -}}
{{- range $from := untilStep $lo (int (add1 $hi)) 1 -}}
{{- if hasKey $fine (toString $from) -}}
{{- range $to := include "sluice.policyLimits" (dict "policy" $policy "from" $from "up" $d.up) | splitList "," -}}
{{- $to := min (max (int $to) $lo) $hi -}}
{{- if and (not $found) (ternary (gt $to $from) (lt $to $from) $d.up) (not (hasKey $fine (toString $to))) (ne $to $lo) (ne $to $hi) -}}
{{- $what := ternary "max(2 × current, 4) per sync" (printf "%s %v%s per %v s" $policy.type $policy.value (ternary " %" "" (eq $policy.type "Percent")) $policy.periodSeconds) (eq $policy.type "Default") -}}
{{- $found = printf "%s policy %s can land on %d (from %d)" $d.label $what $to $from -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if $found }}{{ $problems = append $problems $found }}{{ end -}}
{{- end -}}
{{- end -}}
{{- /* Everything reachable: what the policies land on from any count reached, to a fixed point. */ -}}
{{- $reached := deepCopy $fine -}}
{{- $_ := set $reached (toString $lo) true -}}
{{- $_ := set $reached (toString $hi) true -}}
{{- $state := dict "changed" true -}}
{{- range $round := until (int (add1 $hi)) -}}
{{- if $state.changed -}}
{{- $_ := set $state "changed" false -}}
{{- range $from := keys $reached -}}
{{- range $d := $directions -}}
{{- range $policy := $d.policies -}}
{{- range $to := include "sluice.policyLimits" (dict "policy" $policy "from" $from "up" $d.up) | splitList "," -}}
{{- $key := toString (min (max (int $to) $lo) $hi) -}}
{{- if not (hasKey $reached $key) -}}
{{- $_ := set $reached $key true -}}
{{- $_ := set $state "changed" true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $reach := list -}}
{{- range $n := untilStep $lo (int (add1 $hi)) 1 -}}
{{- if hasKey $reached (toString $n) }}{{ $reach = append $reach $n }}{{ end -}}
{{- end -}}
{{- toJson (dict "problems" $problems "reach" $reach "useful" (trimAll "," $useful)) -}}
{{- end -}}
