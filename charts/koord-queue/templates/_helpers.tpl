{{/* Names. */}}
{{- define "koord-queue.name" -}}
{{- .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name: the release name when it holds the chart's name
     (helm install koord-queue ... gives koord-queue), else <release>-koord-queue. */}}
{{- define "koord-queue.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* The Deployment: koord-queue-controllers, the name Koord-Queue's users look up. */}}
{{- define "koord-queue.controllerName" -}}
{{- printf "%s-controllers" (include "koord-queue.fullname" .) -}}
{{- end -}}

{{- define "koord-queue.serviceAccountName" -}}
{{- default (include "koord-queue.fullname" .) .Values.serviceAccount.name -}}
{{- end -}}

{{- define "koord-queue.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{ include "koord-queue.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "koord-queue.selectorLabels" -}}
app.kubernetes.io/name: {{ include "koord-queue.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: controller
{{- end -}}

{{- define "koord-queue.image" -}}
{{- printf "%s:%s" .Values.controller.image.repository (default .Chart.AppVersion .Values.controller.image.tag) -}}
{{- end -}}

{{/* The job kinds, one per extension value: its kind for --job-kinds, and the API
     group and resource that the webhook and the ClusterRole name. */}}
{{- define "koord-queue.extensionKinds" -}}
pytorch: {kind: PyTorchJob, group: kubeflow.org, version: v1, resource: pytorchjobs}
tf: {kind: TFJob, group: kubeflow.org, version: v1, resource: tfjobs}
mpi: {kind: MPIJob, group: kubeflow.org, version: v1, resource: mpijobs}
batchjob: {kind: Job, group: batch, version: v1, resource: jobs}
ray: {kind: RayJob, group: ray.io, version: v1, resource: rayjobs}
{{- end -}}

{{/* The enabled job kinds as a YAML list (in the order above); fails on an
     enabled extension this chart does not have, and when none is enabled. */}}
{{- define "koord-queue.enabledKinds" -}}
{{- $known := include "koord-queue.extensionKinds" . | fromYaml -}}
{{- range $name, $ext := .Values.extension -}}
{{- if and (kindIs "map" $ext) (hasKey $ext "enable") (not (hasKey $known $name)) $ext.enable -}}
{{- fail (printf "extension.%s is not supported by this chart (supported: batchjob, pytorch, tf, mpi, ray)" $name) -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $name := list "pytorch" "tf" "mpi" "batchjob" "ray" -}}
{{- $ext := index $.Values.extension $name | default dict -}}
{{- if $ext.enable -}}
{{- $out = append $out (index $known $name) -}}
{{- end -}}
{{- end -}}
{{- if not $out -}}
{{- fail "no job kind is enabled: set extension.<pytorch|tf|mpi|batchjob|ray>.enable to true" -}}
{{- end -}}
{{- toYaml (dict "kinds" $out) -}}
{{- end -}}

{{/* API groups of the enabled kinds, each with its resources: [{group, resources}]. */}}
{{- define "koord-queue.enabledGroups" -}}
{{- $kinds := (include "koord-queue.enabledKinds" . | fromYaml).kinds -}}
{{- $groups := list -}}
{{- range $group := list "kubeflow.org" "batch" "ray.io" -}}
{{- $resources := list -}}
{{- range $kinds -}}
{{- if eq .group $group -}}
{{- $resources = append $resources .resource -}}
{{- end -}}
{{- end -}}
{{- if $resources -}}
{{- $groups = append $groups (dict "group" $group "resources" $resources) -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "groups" $groups) -}}
{{- end -}}

{{/* The names the API server dials the webhook Service by. */}}
{{- define "koord-queue.webhookHosts" -}}
{{- $svc := include "koord-queue.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- toYaml (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) -}}
{{- end -}}

{{- define "koord-queue.certSecretName" -}}
{{- printf "%s-webhook-tls" (include "koord-queue.fullname" .) -}}
{{- end -}}
