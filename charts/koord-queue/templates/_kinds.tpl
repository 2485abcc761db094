{{/* Written by `make generate` (python -m koordqueue.manifests) from the job kinds'
     registrations, src/koordqueue/jobs/__init__.py: do not edit. One per extension value,
     in the order --job-kinds lists them: its kind, and the API group, version and
     resource that the webhook and the ClusterRole name; the webhook names every
     version the kind is read in (versions: its own first); the validating one its
     scale subresource too, where its CRD has one (scale: true). */}}
{{- define "koord-queue.extensionKinds" -}}
kinds:
- {extension: pytorch, kind: PyTorchJob, group: kubeflow.org, version: v1, versions: [v1], resource: pytorchjobs, scale: true}
- {extension: tf, kind: TFJob, group: kubeflow.org, version: v1, versions: [v1], resource: tfjobs, scale: false}
- {extension: mpi, kind: MPIJob, group: kubeflow.org, version: v1, versions: [v1, v1alpha1], resource: mpijobs, scale: false}
- {extension: batchjob, kind: Job, group: batch, version: v1, versions: [v1], resource: jobs, scale: false}
- {extension: ray, kind: RayJob, group: ray.io, version: v1, versions: [v1], resource: rayjobs, scale: false}
- {extension: raycluster, kind: RayCluster, group: ray.io, version: v1, versions: [v1], resource: rayclusters, scale: false}
- {extension: spark, kind: SparkApplication, group: sparkoperator.k8s.io, version: v1beta2, versions: [v1beta2], resource: sparkapplications, scale: false}
- {extension: argo, kind: Workflow, group: argoproj.io, version: v1alpha1, versions: [v1alpha1], resource: workflows, scale: false}
{{- end -}}
