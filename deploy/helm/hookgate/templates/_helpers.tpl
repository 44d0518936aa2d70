{{/* Names. */}}
{{- define "hookgate.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "hookgate.fullname" -}}
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

{{- define "hookgate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookgate.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "hookgate.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "hookgate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* The image, from values only. */}}
{{- define "hookgate.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* The port of a listen address (host:port) of the gateway config. */}}
{{- define "hookgate.listenPort" -}}
{{- $addr := required (printf "config.listen.%s must be set (host:port on 0.0.0.0)" .field) (index .listen .field) -}}
{{- splitList ":" $addr | last -}}
{{- end -}}

{{- define "hookgate.proxyPort" -}}
{{- include "hookgate.listenPort" (dict "listen" (required "config.listen must be set" .Values.config.listen) "field" "proxy") -}}
{{- end -}}

{{- define "hookgate.adminPort" -}}
{{- include "hookgate.listenPort" (dict "listen" (required "config.listen must be set" .Values.config.listen) "field" "admin") -}}
{{- end -}}

{{/* Where mounted files live in the pod. */}}
{{- define "hookgate.configDir" -}}/etc/hookgate/config{{- end -}}
{{- define "hookgate.caDir" -}}/etc/hookgate/ca{{- end -}}
{{- define "hookgate.adminDir" -}}/etc/hookgate/admin{{- end -}}
{{- define "hookgate.secretsDir" -}}/etc/hookgate/secrets{{- end -}}

{{/*
The gateway config as the pod reads it: values.config, with ca and
admin.token_file pointed at the mounted Secrets when they are set in values
and not in config.
*/}}
{{- define "hookgate.config" -}}
{{- $cfg := deepCopy .Values.config -}}
{{- if and .Values.ca.secretName (not (hasKey $cfg "ca")) -}}
{{- $_ := set $cfg "ca" (dict "cert_file" (printf "%s/%s" (include "hookgate.caDir" .) .Values.ca.certKey) "key_file" (printf "%s/%s" (include "hookgate.caDir" .) .Values.ca.keyKey)) -}}
{{- end -}}
{{- if .Values.adminToken.secretName -}}
{{- $admin := default (dict) (get $cfg "admin") -}}
{{- if not (hasKey $admin "token_file") -}}
{{- $_ := set $admin "token_file" (printf "%s/%s" (include "hookgate.adminDir" .) .Values.adminToken.key) -}}
{{- end -}}
{{- $_ := set $cfg "admin" $admin -}}
{{- end -}}
{{- toYaml $cfg -}}
{{- end -}}
