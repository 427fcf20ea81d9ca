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
{{- define "boundless.repo" -}}{{ .Values.repository.url | default "/shared/repo" }}{{- end }}

{{/* flags of a server, space-separated: TLS, and the tokens it accepts */}}
{{- define "boundless.serverFlags" -}}
{{- if .Values.tls.enabled }} --tls-cert /etc/boundless/tls/node.pem --tls-key /etc/boundless/tls/node-key.pem --tls-ca /etc/boundless/tls/ca.pem
{{- if .Values.tls.clientAuth }} --tls-client-auth{{ end }}{{ end }}
{{- if .Values.auth.enabled }} --accepted-tokens-file /etc/boundless/auth/tokens.yaml{{ end }}
{{- end }}

{{/* flags of a daemon that calls others, space-separated: TLS (its certificate, for mutual TLS), and its token */}}
{{- define "boundless.callerFlags" -}}
{{- if .Values.tls.enabled }} --tls-cert /etc/boundless/tls/node.pem --tls-key /etc/boundless/tls/node-key.pem --tls-ca /etc/boundless/tls/ca.pem{{ end }}
{{- if .Values.auth.enabled }} --token-file /etc/boundless/auth/trainer.token{{ end }}
{{- end }}

{{/* flags as items to append to a JSON list of args: , "a", "b" */}}
{{- define "boundless.asItems" -}}
{{- range (. | trim | splitList " " | compact) }}, {{ . | quote }}{{ end }}
{{- end }}

{{/* a probe on a gRPC port: the health service, or a TCP check under TLS (the kubelet's gRPC probe has no TLS) */}}
{{- define "boundless.probe" -}}
{{- if .root.Values.tls.enabled }}tcpSocket: {port: {{ .port }}}{{ else }}grpc: {port: {{ .port }}{{ if .service }}, service: {{ .service }}{{ end }}}{{ end }}
{{- end }}

{{- define "boundless.securityContext" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  fsGroup: 10001
{{- end }}

{{- define "boundless.env" -}}
- {name: NUMBA_CACHE_DIR, value: /cache/numba}
{{- if hasPrefix "s3://" (.Values.repository.url | default "") }}
{{- if .Values.repository.s3.endpoint }}
- {name: AWS_ENDPOINT_URL, value: {{ .Values.repository.s3.endpoint | quote }}}
{{- end }}
{{- if .Values.repository.s3.secretName }}
- name: AWS_ACCESS_KEY_ID
  valueFrom: {secretKeyRef: {name: {{ .Values.repository.s3.secretName }}, key: AWS_ACCESS_KEY_ID}}
- name: AWS_SECRET_ACCESS_KEY
  valueFrom: {secretKeyRef: {name: {{ .Values.repository.s3.secretName }}, key: AWS_SECRET_ACCESS_KEY}}
{{- end }}
{{- end }}
{{- end }}

{{- define "boundless.mounts" -}}
- {name: cache, mountPath: /cache}
{{- if .Values.tls.enabled }}
- {name: tls, mountPath: /etc/boundless/tls, readOnly: true}
{{- end }}
{{- if .Values.auth.enabled }}
- {name: auth, mountPath: /etc/boundless/auth, readOnly: true}
{{- end }}
{{- end }}

{{- define "boundless.volumes" -}}
- name: cache
  emptyDir: {sizeLimit: {{ .Values.numbaCache.sizeLimit }}}
{{- if .Values.tls.enabled }}
- name: tls
  secret: {secretName: {{ .Values.tls.secretName }}, defaultMode: 0440}
{{- end }}
{{- if .Values.auth.enabled }}
- name: auth
  secret: {secretName: {{ .Values.auth.secretName }}, defaultMode: 0440}
{{- end }}
{{- end }}

{{- /* A CPU quantity ("4", 2.5, "1500m") as whole threads, at least one. */ -}}
{{- define "boundless.cpuThreads" -}}
{{- $c := toString . -}}
{{- if hasSuffix "m" $c -}}
{{- max 1 (div (atoi (trimSuffix "m" $c)) 1000) -}}
{{- else -}}
{{- max 1 (int (floor (float64 $c))) -}}
{{- end -}}
{{- end -}}
