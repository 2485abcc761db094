{{/* Written by `make generate` (python -m koordqueue.manifests) from the job kinds'
     registrations, src/koordqueue/jobs/__init__.py: do not edit. One per extension value,
     in the order --job-kinds lists them: its kind, and the API group, version and
     resource that the webhook and the ClusterRole name; the webhook names every
     version the kind is read in (versions: its own first). */}}
{{- define "koord-queue.extensionKinds" -}}
kinds:
- {extension: pytorch, kind: PyTorchJob, group: kubeflow.org, version: v1, versions: [v1], resource: pytorchjobs}
- {extension: tf, kind: TFJob, group: kubeflow.org, version: v1, versions: [v1], resource: tfjobs}
- {extension: mpi, kind: MPIJob, group: kubeflow.org, version: v1, versions: [v1, v1alpha1], resource: mpijobs}
- {extension: batchjob, kind: Job, group: batch, version: v1, versions: [v1], resource: jobs}
- {extension: ray, kind: RayJob, group: ray.io, version: v1, versions: [v1], resource: rayjobs}
- {extension: raycluster, kind: RayCluster, group: ray.io, version: v1, versions: [v1], resource: rayclusters}
- {extension: spark, kind: SparkApplication, group: sparkoperator.k8s.io, version: v1beta2, versions: [v1beta2], resource: sparkapplications}
- {extension: argo, kind: Workflow, group: argoproj.io, version: v1alpha1, versions: [v1alpha1], resource: workflows}
{{- end -}}
