{{- define "bessemer.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 63 | trimSuffix "-" }}{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "bessemer.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "bessemer.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "bessemer.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The daemon's command line. */}}
{{- define "bessemer.daemonArgs" -}}
- --port={{ .Values.daemon.port }}
- --bind={{ .Values.daemon.bind }}
- --metrics={{ .Values.daemon.metricsBind }}:{{ .Values.daemon.metricsPort }}
{{- range .Values.daemon.metricsAllow }}
- --http-allow={{ . }}
{{- end }}
- --buffers={{ .Values.daemon.buffers }}
- --core={{ .Values.daemon.core }}
- --log-level={{ .Values.daemon.logLevel }}
{{- if .Values.daemon.noPin }}
- --no-pin
{{- end }}
{{- if .Values.daemon.idleSleepMaxUs }}
- --idle-sleep-max-us={{ .Values.daemon.idleSleepMaxUs }}
{{- end }}
{{- if not .Values.hugepages.enabled }}
- --no-hugepages
{{- end }}
{{- if .Values.daemon.tls.secretName }}
- --tls-cert=/etc/bessemer/tls/tls.crt
- --tls-key=/etc/bessemer/tls/tls.key
{{- if .Values.daemon.tls.requireClientCert }}
- --tls-client-ca=/etc/bessemer/tls/ca.crt
{{- end }}
{{- end }}
{{- if .Values.daemon.tokenSecret }}
- --token-file=/etc/bessemer/token/token
{{- end }}
{{- if .Values.daemon.insecureRemote }}
- --insecure-remote
{{- end }}
{{- range .Values.daemon.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end -}}
