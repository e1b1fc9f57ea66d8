{{/*
Chart name, truncated to 63 characters (the DNS label limit of some name fields).
*/}}
{{- define "s3-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: "<release>-<chart>", or the release name when it already contains the chart name.
*/}}
{{- define "s3-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"name-version" for the helm.sh/chart label.
*/}}
{{- define "s3-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every object carries.
*/}}
{{- define "s3-operator.labels" -}}
helm.sh/chart: {{ include "s3-operator.chart" . }}
{{ include "s3-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ include "s3-operator.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: s3-operator
{{- end }}

{{/*
Labels that select the operator's pods (immutable in the Deployment selector: keep them stable).
*/}}
{{- define "s3-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "s3-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount the operator runs as.
*/}}
{{- define "s3-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "s3-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image tag: image.tag, else the chart's appVersion.
*/}}
{{- define "s3-operator.imageTag" -}}
{{- default .Chart.AppVersion .Values.image.tag }}
{{- end }}

{{/*
Image reference: repository@digest when a digest is set, else repository:tag.
*/}}
{{- define "s3-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "s3-operator.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
Name of the leader-election Lease.
*/}}
{{- define "s3-operator.leaderElectionId" -}}
{{- default (printf "%s-leader" (include "s3-operator.fullname" .)) .Values.leaderElection.id }}
{{- end }}

{{/*
The operator's RBAC rules, from files/rbac.yaml (generated from config/rbac, the single source).
Returns the map {manager, leaderElection, metricsAuth, metricsReader, classReader: [rules]} as YAML; callers
use fromYaml.
*/}}
{{- define "s3-operator.rbacRules" -}}
{{- $raw := .Files.Get "files/rbac.yaml" }}
{{- if not $raw }}
{{- fail "s3-operator: files/rbac.yaml is missing from the chart (it is generated from config/rbac by `cargo xtask generate`)" }}
{{- end }}
{{- $rules := fromYaml $raw }}
{{- if hasKey $rules "Error" }}
{{- fail (printf "s3-operator: files/rbac.yaml is not valid YAML: %s" $rules.Error) }}
{{- end }}
{{- if or (not $rules.manager) (not $rules.leaderElection) (not $rules.metricsAuth) (not $rules.metricsReader) (not $rules.classReader) }}
{{- fail "s3-operator: files/rbac.yaml must hold the rule lists `manager`, `leaderElection`, `metricsAuth`, `metricsReader` and `classReader`" }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{/*
A duration in milliseconds (as a float string), for comparing durations in validations.
Accepts Go durations (1h30m, 2.5s, 500ms, 10us, 7ns) and Prometheus durations (1d, 2w, 1y, 30s).
Usage: include "s3-operator.durationMs" (list "value.path" $value)
*/}}
{{- define "s3-operator.durationMs" -}}
{{- $path := index . 0 }}
{{- $value := toString (index . 1) }}
{{- $units := dict "ns" 0.000001 "us" 0.001 "µs" 0.001 "μs" 0.001 "ms" 1.0 "s" 1000.0 "m" 60000.0 "h" 3600000.0 "d" 86400000.0 "w" 604800000.0 "y" 31536000000.0 }}
{{- $total := 0.0 }}
{{- $parts := regexFindAll "[0-9]+(\\.[0-9]+)?(ns|us|µs|μs|ms|s|m|h|d|w|y)" $value -1 }}
{{- if ne (join "" $parts) $value }}
{{- fail (printf "%s: %q is not a duration such as 30s, 10m or 1h" $path $value) }}
{{- end }}
{{- range $parts }}
{{- $unit := regexFind "(ns|us|µs|μs|ms|s|m|h|d|w|y)$" . }}
{{- $number := regexFind "^[0-9]+(\\.[0-9]+)?" . }}
{{- $total = addf $total (mulf (float64 $number) (index $units $unit)) }}
{{- end }}
{{- $total }}
{{- end }}

{{/*
Whether the chart renders a PodDisruptionBudget: podDisruptionBudget.enabled when true or false,
else (null, the default) exactly when there is more than one replica, so a drain can never evict
the last one.
*/}}
{{- define "s3-operator.pdbEnabled" -}}
{{- $enabled := .Values.podDisruptionBudget.enabled }}
{{- if kindIs "bool" $enabled }}
{{- if $enabled }}true{{ end }}
{{- else if gt (int .Values.replicaCount) 1 }}true
{{- end }}
{{- end }}

{{/*
The port of a URL: the explicit one, else the scheme's default (https 443, http 80).
*/}}
{{- define "s3-operator.urlPort" -}}
{{- $url := urlParse . }}
{{- $port := regexFind ":[0-9]+$" $url.host | trimPrefix ":" }}
{{- if $port }}{{ $port }}
{{- else if eq $url.scheme "http" }}80
{{- else }}443
{{- end }}
{{- end }}

{{/*
Whether an optional scalar value is set: neither null nor "".
*/}}
{{- define "s3-operator.isSet" -}}
{{- if and (not (kindIs "invalid" .)) (ne (toString .) "") }}true{{ end }}
{{- end }}

{{/*
Cross-field validations the JSON schema cannot express. Included by the Deployment, so every
render runs them; each failure names the values involved.
*/}}
{{- define "s3-operator.validate" -}}
{{- $v := .Values }}
{{- if and (gt (int $v.replicaCount) 1) (not $v.leaderElection.enabled) }}
{{- fail (printf "replicaCount is %d but leaderElection.enabled is false: replicas would reconcile the same objects at once. Set leaderElection.enabled=true or replicaCount=1." (int $v.replicaCount)) }}
{{- end }}
{{- if eq (int $v.metrics.port) (int $v.healthProbe.port) }}
{{- fail (printf "metrics.port and healthProbe.port are both %d; they must differ." (int $v.metrics.port)) }}
{{- end }}
{{- if $v.leaderElection.enabled }}
{{- $lease := include "s3-operator.durationMs" (list "leaderElection.leaseDuration" $v.leaderElection.leaseDuration) | float64 }}
{{- $renew := include "s3-operator.durationMs" (list "leaderElection.renewPeriod" $v.leaderElection.renewPeriod) | float64 }}
{{- if le $lease $renew }}
{{- fail (printf "leaderElection.renewPeriod (%s) must be shorter than leaderElection.leaseDuration (%s), or the lease expires between renewals." $v.leaderElection.renewPeriod $v.leaderElection.leaseDuration) }}
{{- end }}
{{- end }}
{{- if and $v.aws.roleArn (not $v.serviceAccount.create) }}
{{- fail "aws.roleArn is set but serviceAccount.create is false: the chart can only annotate a ServiceAccount it creates. Annotate your ServiceAccount with eks.amazonaws.com/role-arn yourself and leave aws.roleArn empty, or set serviceAccount.create=true." }}
{{- end }}
{{- $reserved := list "CLUSTER_NAME" "BUCKET_NAME_PREFIX" "DEFAULT_DELETION_POLICY" "WATCH_NAMESPACE" "RESYNC_PERIOD" "MAX_CONCURRENT_RECONCILES" "METRICS_BIND_ADDRESS" "METRICS_SECURE" "METRICS_CERT_DIR" "HEALTH_PROBE_BIND_ADDRESS" "LEADER_ELECT" "LEADER_ELECTION_ID" "LEASE_DURATION" "LEASE_RENEW_PERIOD" "POD_NAMESPACE" "POD_NAME" "LOG_FORMAT" "RUST_LOG" "AWS_REGION" "AWS_ENDPOINT_URL" "OIDC_PROVIDER_ARN" "DRIFT_EVENTS_QUEUE_URL" "EKS_CLUSTER_NAME" "POD_IDENTITY_ROLE_ARN" "OTEL_EXPORTER_OTLP_ENDPOINT" "OTEL_EXPORTER_OTLP_PROTOCOL" "OTEL_SERVICE_NAME" "OTEL_RESOURCE_ATTRIBUTES" }}
{{- $seen := dict }}
{{- range $i, $e := $v.extraEnv }}
{{- if has $e.name $reserved }}
{{- fail (printf "extraEnv[%d].name is %s, which the chart sets from its own values (see values.yaml); set that value instead." $i $e.name) }}
{{- end }}
{{- if hasKey $seen $e.name }}
{{- fail (printf "extraEnv[%d].name %s is listed twice." $i $e.name) }}
{{- end }}
{{- $_ := set $seen $e.name true }}
{{- if and (hasKey $e "value") (hasKey $e "valueFrom") }}
{{- fail (printf "extraEnv[%d] (%s) sets both value and valueFrom; set one." $i $e.name) }}
{{- end }}
{{- end }}
{{- if and $v.metrics.certSecret (not $v.metrics.secure) }}
{{- fail "metrics.certSecret is set but metrics.secure is false: the certificate is only used for HTTPS. Set metrics.secure=true or leave metrics.certSecret empty." }}
{{- end }}
{{- if include "s3-operator.pdbEnabled" . }}
{{- $min := $v.podDisruptionBudget.minAvailable }}
{{- $max := $v.podDisruptionBudget.maxUnavailable }}
{{- if and (include "s3-operator.isSet" $min) (include "s3-operator.isSet" $max) }}
{{- fail "podDisruptionBudget.minAvailable and podDisruptionBudget.maxUnavailable are both set; a PodDisruptionBudget takes only one of them." }}
{{- end }}
{{- if and (include "s3-operator.isSet" $min) (not (kindIs "string" $min)) (gt (int $v.replicaCount) 0) (ge (int $min) (int $v.replicaCount)) }}
{{- fail (printf "podDisruptionBudget.minAvailable (%d) must be lower than replicaCount (%d), or no pod can ever be evicted and node drains block." (int $min) (int $v.replicaCount)) }}
{{- end }}
{{- if and (include "s3-operator.isSet" $min) (kindIs "string" $min) (eq $min "100%") }}
{{- fail "podDisruptionBudget.minAvailable is 100%: no pod could ever be evicted and node drains would block. Use a lower percentage or maxUnavailable." }}
{{- end }}
{{- if and (include "s3-operator.isSet" $max) (or (and (kindIs "string" $max) (eq $max "0%")) (and (not (kindIs "string" $max)) (eq (int $max) 0))) }}
{{- fail (printf "podDisruptionBudget.maxUnavailable is %v: no pod could ever be evicted and node drains would block. Use 1 or more." $max) }}
{{- end }}
{{- end }}
{{- if $v.serviceMonitor.enabled }}
{{- if and $v.serviceMonitor.interval $v.serviceMonitor.scrapeTimeout }}
{{- $interval := include "s3-operator.durationMs" (list "serviceMonitor.interval" $v.serviceMonitor.interval) | float64 }}
{{- $timeout := include "s3-operator.durationMs" (list "serviceMonitor.scrapeTimeout" $v.serviceMonitor.scrapeTimeout) | float64 }}
{{- if gt $timeout $interval }}
{{- fail (printf "serviceMonitor.scrapeTimeout (%s) must not be longer than serviceMonitor.interval (%s)." $v.serviceMonitor.scrapeTimeout $v.serviceMonitor.interval) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}

{{/*
OTEL_RESOURCE_ATTRIBUTES: the pod's Kubernetes identity (expanded by the kubelet from the
POD_NAMESPACE and POD_NAME variables defined before it) plus otel.resourceAttributes, which win.
*/}}
{{- define "s3-operator.otelResourceAttributes" -}}
{{- $attrs := dict "k8s.namespace.name" "$(POD_NAMESPACE)" "k8s.pod.name" "$(POD_NAME)" "k8s.deployment.name" (include "s3-operator.fullname" .) }}
{{- $attrs = merge (deepCopy (default dict .Values.otel.resourceAttributes)) $attrs }}
{{- $pairs := list }}
{{- range $k := keys $attrs | sortAlpha }}
{{- $pairs = append $pairs (printf "%s=%s" $k (toString (index $attrs $k))) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}
