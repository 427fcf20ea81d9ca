{{- define "boundless.name" -}}{{ .Release.Name }}-boundless{{- end }}
{{- define "boundless.image" -}}{{ .Values.image.repository }}:{{ .Values.image.tag }}{{- end }}
{{- define "boundless.labels" -}}
app.kubernetes.io/name: boundless
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}
{{- define "boundless.psAddresses" -}}
{{- $root := . -}}
{{- range $i, $_ := until (int .Values.ps.shards) -}}
{{- if $i }},{{ end }}{{ include "boundless.name" $root }}-ps-{{ $i }}.{{ include "boundless.name" $root }}-ps:{{ $root.Values.ps.port }}
{{- end -}}
{{- end }}
