{{- define "odradek.fullname" -}}
{{- printf "%s-operator" .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "odradek.image" -}}
{{- $repository := .Values.image.repository -}}
{{- with .Values.image.registry }}{{ $repository = printf "%s/%s" (trimSuffix "/" .) $repository }}{{ end -}}
{{- printf "%s:%s" $repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* A KafkaCluster component's pod template: cluster.pod, with the chart's imagePullSecrets. */}}
{{- define "odradek.clusterPod" -}}
{{- $pod := deepCopy (.Values.cluster.pod | default dict) -}}
{{- if and .Values.imagePullSecrets (not (hasKey $pod "imagePullSecrets")) -}}
{{- $_ := set $pod "imagePullSecrets" .Values.imagePullSecrets -}}
{{- end -}}
{{- if $pod -}}
pod:
  {{- toYaml $pod | nindent 2 }}
{{- end -}}
{{- end -}}

{{- define "odradek.serviceAccountName" -}}
{{- default (include "odradek.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "odradek.labels" -}}
app.kubernetes.io/name: odradek
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "odradek.selector" -}}
app.kubernetes.io/name: odradek
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end -}}
