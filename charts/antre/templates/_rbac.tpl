{{/*
The operator's RBAC rules, kept in one place for both the ClusterRole (cluster-wide mode) and
the per-namespace Roles (namespaced mode). Each rule names the code path that needs it; a verb
nobody calls does not belong here.
*/}}

{{/*
Rules on namespaced resources: JobQueues and the children rendered from them.
*/}}
{{- define "antre.operator.namespacedRules" -}}
# Watch JobQueues; patch them for kopf's finalizer and its diff-base/progress annotations.
# No get: kopf lists and watches, and its daemons get the body from the watch; the operator
# reads no single JobQueue (the uninstall hook does, under an account of its own).
- apiGroups: [antre.dev]
  resources: [jobqueues]
  verbs: [list, watch, patch]
# Children carry an ownerReference with blockOwnerDeletion: true; setting that requires update
# on the owner's finalizers subresource where OwnerReferencesPermissionEnforcement is on
# (e.g. OpenShift), or creating a child is forbidden.
- apiGroups: [antre.dev]
  resources: [jobqueues/finalizers]
  verbs: [update]
# Report status (conditions, replicas, backlog) through the status subresource (kube.patch).
- apiGroups: [antre.dev]
  resources: [jobqueues/status]
  verbs: [patch]
# The worker and API Deployments: render, repair when edited or deleted by hand, scale.
# kopf watches them (labelled ours); kube.apply writes with server-side apply, a patch that
# also needs create when the object does not exist yet; never a replace (PUT).
- apiGroups: [apps]
  resources: [deployments]
  verbs: [get, list, watch, create, patch, delete]
# The reaper CronJob. The operator never deletes it (garbage collection removes it with the
# JobQueue), but adopting an orphaned one sets its ownerReference, and where
# OwnerReferencesPermissionEnforcement is on (e.g. OpenShift) that requires delete: "cannot set
# an ownerRef on a resource you can't delete".
- apiGroups: [batch]
  resources: [cronjobs]
  verbs: [get, list, watch, create, patch, delete]
# The API Service.
- apiGroups: [""]
  resources: [services]
  verbs: [get, list, watch, create, patch, delete]
# Worker pods: list them (by label) and annotate controller.kubernetes.io/pod-deletion-cost so
# idle pods go first on scale-down. No watch: the operator reads them only before scaling down.
- apiGroups: [""]
  resources: [pods]
  verbs: [list, patch]
# Read the Secret named by a JobQueue's spec.redis.urlSecretRef (never list: only by name).
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
# Post Events (scaling decisions, errors) through kopf.event, which only creates core v1 Events.
- apiGroups: [""]
  resources: [events]
  verbs: [create]
{{- end }}

{{/*
Cluster-scoped, read-only: kopf watches CRDs to notice the JobQueue CRD being installed or changed.
*/}}
{{- define "antre.operator.observerRules" -}}
- apiGroups: [apiextensions.k8s.io]
  resources: [customresourcedefinitions]
  verbs: [list, watch]
{{- end }}
