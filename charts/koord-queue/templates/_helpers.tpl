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

{{/* The enabled job kinds as a YAML list (in the order of koord-queue.extensionKinds,
     which make generate writes to _kinds.tpl from the kinds' registrations); fails on an
     enabled extension this chart does not have, and when none is enabled. */}}
{{- define "koord-queue.enabledKinds" -}}
{{- $known := (include "koord-queue.extensionKinds" . | fromYaml).kinds -}}
{{- $names := list -}}
{{- range $known -}}
{{- $names = append $names .extension -}}
{{- end -}}
{{- $workloads := (include "koord-queue.workloadExtensions" . | fromYaml).names -}}
{{- range $name, $ext := .Values.extension -}}
{{- if and (kindIs "map" $ext) (hasKey $ext "enable") (not (has $name $names)) (not (has $name $workloads)) $ext.enable -}}
{{- fail (printf "extension.%s is not supported by this chart (supported: %s)" $name (join ", " (concat $names $workloads))) -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $known -}}
{{- $ext := index $.Values.extension .extension | default dict -}}
{{- if $ext.enable -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- if not $out -}}
{{- fail (printf "no job kind is enabled: set extension.<%s>.enable to true" (join "|" $names)) -}}
{{- end -}}
{{- toYaml (dict "kinds" $out) -}}
{{- end -}}

{{/* API groups and versions of the enabled kinds, each with its resources:
     [{group, version, resources}], in the order their first kind comes. */}}
{{- define "koord-queue.enabledGroups" -}}
{{- $kinds := (include "koord-queue.enabledKinds" . | fromYaml).kinds -}}
{{- $keys := list -}}
{{- range $kinds -}}
{{- $keys = append $keys (printf "%s/%s" .group .version) -}}
{{- end -}}
{{- $out := list -}}
{{- range $key := $keys | uniq -}}
{{- $resources := list -}}
{{- $first := dict -}}
{{- range $kinds -}}
{{- if eq (printf "%s/%s" .group .version) $key -}}
{{- $resources = append $resources .resource -}}
{{- $first = . -}}
{{- end -}}
{{- end -}}
{{- $out = append $out (dict "group" $first.group "version" $first.version "resources" $resources) -}}
{{- end -}}
{{- toYaml (dict "groups" $out) -}}
{{- end -}}

{{/* The webhook's rules: each API group and version an enabled kind is read in (its own,
     and the others its registration names: MPIJob's v1alpha1), with its resources:
     [{group, version, resources, scales}] (scales: the scale subresources, validated on
     UPDATE), in the order their first kind comes. */}}
{{- define "koord-queue.webhookRules" -}}
{{- $kinds := (include "koord-queue.enabledKinds" . | fromYaml).kinds -}}
{{- $keys := list -}}
{{- range $kind := $kinds -}}
{{- range $version := $kind.versions -}}
{{- $keys = append $keys (printf "%s/%s" $kind.group $version) -}}
{{- end -}}
{{- end -}}
{{- $out := list -}}
{{- range $key := $keys | uniq -}}
{{- $resources := list -}}
{{- $scales := list -}}
{{- range $kind := $kinds -}}
{{- range $version := $kind.versions -}}
{{- if eq (printf "%s/%s" $kind.group $version) $key -}}
{{- $resources = append $resources $kind.resource -}}
{{- if $kind.scale -}}
{{- $scales = append $scales (printf "%s/scale" $kind.resource) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $out = append $out (dict "group" (dir $key) "version" (base $key) "resources" $resources "scales" $scales) -}}
{{- end -}}
{{- toYaml (dict "rules" $out) -}}
{{- end -}}

{{/* The names the API server dials the webhook Service by. */}}
{{- define "koord-queue.webhookHosts" -}}
{{- $ns := .Release.Namespace -}}
{{- $hosts := list -}}
{{- $services := list (include "koord-queue.fullname" .) -}}
{{- if .Values.controller.enableVisibilityServer -}}
{{- $services = append $services (include "koord-queue.visibilityService" .) -}}
{{- end -}}
{{- range $svc := $services -}}
{{- $hosts = concat $hosts (list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns)) -}}
{{- end -}}
{{- toYaml $hosts -}}
{{- end -}}

{{- /* Koord-Queue's name for the Service of the visibility API (the leader's pod). */ -}}
{{- define "koord-queue.visibilityService" -}}
{{- printf "%s-visibility-server" (include "koord-queue.fullname" .) -}}
{{- end -}}

{{- define "koord-queue.certSecretName" -}}
{{- printf "%s-webhook-tls" (include "koord-queue.fullname" .) -}}
{{- end -}}

{{/* Whose namespaces' jobs are queued (Kueue's managedJobsNamespaceSelector): the webhooks'
     namespaceSelector and the controller's --managed-jobs-namespace-selector, one value.
     Empty: every namespace but Kubernetes' own and the release's. */}}
{{- define "koord-queue.namespaceSelector" -}}
{{- if .Values.webhook.namespaceSelector -}}
{{- toYaml .Values.webhook.namespaceSelector -}}
{{- else -}}
matchExpressions:
- key: kubernetes.io/metadata.name
  operator: NotIn
  values: {{ toJson (concat (list "kube-system" "kube-public" "kube-node-lease") (list .Release.Namespace) | uniq) }}
{{- end -}}
{{- end -}}

{{/* The workloads queued by a scheduling gate (controller/gating.py), and those enabled. */}}
{{- define "koord-queue.workloadExtensions" -}}
names: [pod, deployment, statefulset, leaderworkerset]
{{- end -}}

{{- define "koord-queue.enabledWorkloads" -}}
{{- $out := list -}}
{{- range (include "koord-queue.workloadExtensions" . | fromYaml).names -}}
{{- $ext := index $.Values.extension . | default dict -}}
{{- if $ext.enable -}}
{{- $out = append $out . -}}
{{- end -}}
{{- end -}}
{{- toYaml (dict "names" $out) -}}
{{- end -}}
