{{- define "infergate.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infergate.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "infergate.selectorLabels" -}}
app.kubernetes.io/name: {{ include "infergate.name" . }}-operator
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "infergate.labels" -}}
{{ include "infergate.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "infergate.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "infergate.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- /* The Secret holding the operator's status client certificate (tls.crt, tls.key, ca.crt). */ -}}
{{- define "infergate.statusClientSecret" -}}
{{- if .Values.statusClientCertificate.create -}}
{{- printf "%s-status-client" (include "infergate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- required "statusClientCertificate.existingSecret is needed when statusClientCertificate.create is false" .Values.statusClientCertificate.existingSecret -}}
{{- end -}}
{{- end -}}

{{- /* The Secret holding the CA that signs it, when the chart makes one. */ -}}
{{- define "infergate.statusCASecret" -}}
{{- printf "%s-status-ca" (include "infergate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "infergate.kubernetesVersion" -}}
{{- default (printf "%s.%s" .Capabilities.KubeVersion.Major (.Capabilities.KubeVersion.Minor | trimSuffix "+")) .Values.kubernetesVersion -}}
{{- end -}}

{{- define "infergate.leaseName" -}}
{{- printf "%s-leader" (include "infergate.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
