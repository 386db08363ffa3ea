{{- define "floodgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "floodgate.fullname" -}}
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

{{- define "floodgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "floodgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "floodgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "floodgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "floodgate.tokensSecret" -}}
{{- default (printf "%s-tokens" (include "floodgate.fullname" .)) .Values.tokens.existingSecret }}
{{- end }}

{{- define "floodgate.redisSecret" -}}
{{- default (printf "%s-redis" (include "floodgate.fullname" .)) .Values.redis.auth.existingSecret }}
{{- end }}

{{- /*
Where the Secrets are mounted, and how floodgate.yaml (mounted at
/etc/floodgate) names them: relative names are resolved against the
configuration file's directory.
*/}}
{{- define "floodgate.secretsDir" -}}/etc/floodgate-secrets{{- end }}
{{- define "floodgate.secretsRel" -}}../floodgate-secrets{{- end }}

{{- /*
floodgate.yaml: .Values.config with what the chart decides written over it.
*/}}
{{- define "floodgate.config" -}}
{{- $l := .Values.listeners }}
{{- $cfg := deepCopy .Values.config }}
{{- $rel := include "floodgate.secretsRel" . }}
{{- if $l.proxy.enabled }}
{{- $_ := set $cfg "proxy" (mergeOverwrite (deepCopy (get $cfg "proxy" | default dict)) (dict "listen" (printf ":%d" (int $l.proxy.port)))) }}
{{- else }}
{{- $_ := unset $cfg "proxy" }}
{{- end }}
{{- /* The Service's names, which clients give as the Host. */}}
{{- $svc := include "floodgate.fullname" . }}
{{- $hosts := list $svc (printf "%s.%s" $svc .Release.Namespace) (printf "%s.%s.svc" $svc .Release.Namespace) (printf "%s.%s.svc.%s" $svc .Release.Namespace .Values.clusterDomain) }}
{{- if $l.check.enabled }}
{{- $check := deepCopy (get $cfg "check" | default dict) }}
{{- $_ := set $check "allowed_hosts" (concat (get $check "allowed_hosts" | default list) $hosts | uniq) }}
{{- $_ := set $cfg "check" (mergeOverwrite $check (dict "listen" (printf ":%d" (int $l.check.port)) "token_file" (printf "%s/tokens/check-token" $rel))) }}
{{- else }}
{{- $_ := unset $cfg "check" }}
{{- end }}
{{- $admin := deepCopy (get $cfg "admin" | default dict) }}
{{- $_ := set $admin "allowed_hosts" (concat (get $admin "allowed_hosts" | default list) $hosts | uniq) }}
{{- $_ := set $cfg "admin" (mergeOverwrite $admin (dict "listen" (printf ":%d" (int $l.admin.port)) "token_file" (printf "%s/tokens/admin-token" $rel))) }}
{{- if $l.envoy.enabled }}
{{- $envoy := deepCopy (default dict .Values.envoy.config) }}
{{- $_ := set $envoy "listen" (printf ":%d" (int $l.envoy.port)) }}
{{- $files := list }}
{{- range .Values.envoy.rules }}
{{- if or (not (regexMatch "^[-._a-zA-Z0-9]+$" .name)) (eq .name "floodgate.yaml") }}
{{- fail (printf "envoy.rules: the name %q is not a file name of the ConfigMap (letters, digits, - _ . and not floodgate.yaml)" .name) }}
{{- end }}
{{- $files = append $files .name }}
{{- end }}
{{- $_ := set $envoy "ratelimit_config" $files }}
{{- $_ := set $cfg "envoy" $envoy }}
{{- else }}
{{- $_ := unset $cfg "envoy" }}
{{- end }}
{{- if $l.postgres.enabled }}
{{- $pg := deepCopy (default dict .Values.postgres.config) }}
{{- $_ := set $pg "listen" (printf ":%d" (int $l.postgres.port)) }}
{{- $_ := set $pg "upstream" (required "postgres.upstream is required with listeners.postgres.enabled (host:port of the PostgreSQL server)" .Values.postgres.upstream) }}
{{- $_ := set $cfg "postgres" $pg }}
{{- else }}
{{- $_ := unset $cfg "postgres" }}
{{- end }}
{{- if .Values.redis.enabled }}
{{- $storage := deepCopy (get $cfg "storage" | default dict) }}
{{- if ne (get $storage "engine" | toString) "hybrid" }}
{{- $_ := set $storage "engine" "redis" }}
{{- end }}
{{- $redis := deepCopy (default dict .Values.redis.config) }}
{{- if .Values.redis.auth.enabled }}
{{- $_ := set $redis "password_file" (printf "%s/redis/password" $rel) }}
{{- end }}
{{- $_ := set $storage "redis" $redis }}
{{- if ne (get $storage "engine") "hybrid" }}
{{- $_ := set $storage "failure" (mergeOverwrite (deepCopy (default dict .Values.redis.failure)) (get $storage "failure" | default dict)) }}
{{- end }}
{{- $_ := set $cfg "storage" $storage }}
{{- end }}
{{- toYaml $cfg }}
{{- end }}
