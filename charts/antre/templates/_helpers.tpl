{{/*
Helpers shared by all templates. Every define is prefixed "antre." so that it cannot collide
with a define of the same name in a parent or sibling chart.
*/}}

{{/*
The chart name. Cut at 63 characters: the DNS label limit of Kubernetes names and label values.
*/}}
{{- define "antre.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name, used as the prefix of every object name. "-redis" and similar suffixes are
appended to it, so it is cut at 63 characters like any name, and the suffixed names are cut again.
*/}}
{{- define "antre.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"chart-version", for the helm.sh/chart label ("+" is not allowed in label values).
*/}}
{{- define "antre.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels of one component. Call with (dict "ctx" $ "component" "operator").
They are immutable on Deployments and StatefulSets, so they never include the chart version.
*/}}
{{- define "antre.selectorLabels" -}}
app.kubernetes.io/name: {{ include "antre.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
All labels of one component's objects: the selector labels, the version labels and commonLabels.
Call with (dict "ctx" $ "component" "operator").
*/}}
{{- define "antre.labels" -}}
{{ include "antre.selectorLabels" . }}
helm.sh/chart: {{ include "antre.chart" .ctx }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: antre
{{- with .ctx.Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
An image reference from an image block {repository, tag, digest}: the digest wins over the tag,
and the tag defaults to the given default (the appVersion for our own images).
Call with (dict "image" .Values.operator.image "defaultTag" .Chart.AppVersion).
*/}}
{{- define "antre.image" -}}
{{- if .image.digest }}
{{- printf "%s@%s" .image.repository .image.digest }}
{{- else }}
{{- printf "%s:%s" .image.repository (default .defaultTag .image.tag) }}
{{- end }}
{{- end }}

{{/*
The container securityContext of every container the chart renders: what the "restricted"
Pod Security Standard requires, plus a read-only root filesystem (writable paths get an emptyDir).
*/}}
{{- define "antre.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop:
    - ALL
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
The pod securityContext for a numeric non-root user. Call with the UID.
*/}}
{{- define "antre.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ . }}
runAsGroup: {{ . }}
fsGroup: {{ . }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/*
The volume automountServiceAccountToken would mount, for the pods that talk to the API server
(their ServiceAccounts do not automount, so no other pod naming them gets a token): a bound
token the kubelet rotates (the client re-reads it), the cluster's CA and the namespace. Mount it
at /var/run/secrets/kubernetes.io/serviceaccount, where the in-cluster client looks.
*/}}
{{- define "antre.kubeApiAccessVolume" -}}
- name: kube-api-access
  projected:
    defaultMode: 0444
    sources:
      - serviceAccountToken:
          path: token
          expirationSeconds: 3607
      - configMap:
          name: kube-root-ca.crt
          items:
            - key: ca.crt
              path: ca.crt
      - downwardAPI:
          items:
            - path: namespace
              fieldRef:
                fieldPath: metadata.namespace
{{- end }}

{{/*
The operator's ServiceAccount name.
*/}}
{{- define "antre.operator.serviceAccountName" -}}
{{- if .Values.operator.serviceAccount.create }}
{{- default (include "antre.fullname" .) .Values.operator.serviceAccount.name }}
{{- else }}
{{- required "operator.serviceAccount.name is required when operator.serviceAccount.create is false" .Values.operator.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
"true" when the operator watches every namespace (no operator.watchNamespaces), else "".
*/}}
{{- define "antre.operator.clusterWide" -}}
{{- if not .Values.operator.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
"true" when the operator runs with kopf peering (more than one replica), else "".
A single replica runs --standalone: nothing to coordinate with, no peering object needed.
*/}}
{{- define "antre.operator.peering" -}}
{{- if gt (int .Values.operator.replicaCount) 1 }}true{{ end }}
{{- end }}

{{/*
Redis object names and address.
*/}}
{{- define "antre.redis.fullname" -}}
{{- /* At most 52 characters, the longest StatefulSet name whose pods Kubernetes can create (it
  labels each with the name, a dash and a revision hash of up to 10, in a 63-character label
  value); the full name is cut rather than the suffix, so "-headless" still makes a name of its
  own. Names of full names up to 46 characters are unchanged. */}}
{{- printf "%s-redis" (include "antre.fullname" . | trunc 46 | trimSuffix "-") }}
{{- end }}

{{- define "antre.redis.secretName" -}}
{{- default (include "antre.redis.fullname" .) .Values.redis.auth.existingSecret }}
{{- end }}

{{- define "antre.redis.host" -}}
{{- printf "%s.%s.svc" (include "antre.redis.fullname" .) .Release.Namespace }}
{{- end }}

{{/*
The environment of the Redis containers: the password (redis-cli, probes and kubectl exec read
REDISCLI_AUTH), and for the replicated architecture what the start scripts need.
*/}}
{{- define "antre.redis.env" -}}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "antre.redis.secretName" . }}
      key: {{ .Values.redis.auth.existingSecretPasswordKey }}
- name: REDISCLI_AUTH
  valueFrom:
    secretKeyRef:
      name: {{ include "antre.redis.secretName" . }}
      key: {{ .Values.redis.auth.existingSecretPasswordKey }}
{{- if include "antre.redis.replicated" . }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: SELF_HOST
  value: "$(POD_NAME).{{ include "antre.redis.headless" . }}.{{ .Release.Namespace }}.svc"
- name: PEERS
  value: {{ include "antre.redis.peers" . | quote }}
- name: MASTER_SET
  value: {{ .Values.redis.sentinel.masterSet | quote }}
- name: QUORUM
  value: {{ add1 (div (int .Values.redis.replication.replicas) 2) | quote }}
- name: SENTINEL_PORT
  value: {{ .Values.redis.sentinel.port | quote }}
- name: DOWN_AFTER_MS
  value: {{ .Values.redis.sentinel.downAfterMilliseconds | quote }}
- name: FAILOVER_TIMEOUT_MS
  value: {{ .Values.redis.sentinel.failoverTimeoutMilliseconds | quote }}
{{- end }}
{{- end }}

{{- define "antre.redis.replicated" -}}
{{- if eq .Values.redis.architecture "replication" }}true{{ end }}
{{- end }}

{{/*
The headless Service giving each Redis pod of the replicated architecture a stable DNS name.
*/}}
{{- define "antre.redis.headless" -}}
{{- printf "%s-headless" (include "antre.redis.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The replicated architecture's pods as the start scripts take them: "host:redisPort:sentinelPort"
per pod, space-separated, pod 0 first (the primary of a first install).
*/}}
{{- define "antre.redis.peers" -}}
{{- $peers := list }}
{{- range $i := until (int .Values.redis.replication.replicas) }}
{{- $peers = append $peers (printf "%s-%d.%s.%s.svc:6379:%d" (include "antre.redis.fullname" $) $i (include "antre.redis.headless" $) $.Release.Namespace (int $.Values.redis.sentinel.port)) }}
{{- end }}
{{- join " " $peers }}
{{- end }}

{{/*
The Sentinels' addresses for a redis+sentinel:// URL: "host:port,host:port,...".
*/}}
{{- define "antre.redis.sentinels" -}}
{{- $hosts := list }}
{{- range $i := until (int .Values.redis.replication.replicas) }}
{{- $hosts = append $hosts (printf "%s-%d.%s.%s.svc:%d" (include "antre.redis.fullname" $) $i (include "antre.redis.headless" $) $.Release.Namespace (int $.Values.redis.sentinel.port)) }}
{{- end }}
{{- join "," $hosts }}
{{- end }}

{{/*
The Secret holding the example JobQueue's API token, when the chart generates it.
*/}}
{{- define "antre.example.apiTokenSecretName" -}}
{{- printf "%s-%s-api-token" (include "antre.fullname" .) .Values.exampleJobQueue.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The ports a client of the chart's Redis connects to, as NetworkPolicy ports: Redis, and with
the replicated architecture the Sentinels.
*/}}
{{- define "antre.redis.networkPolicyPorts" -}}
- port: 6379
  protocol: TCP
{{- if include "antre.redis.replicated" . }}
- port: {{ .Values.redis.sentinel.port }}
  protocol: TCP
{{- end }}
{{- end }}

{{/*
The namespaceSelector of the namespaces whose JobQueue pods may reach the chart's Redis:
networkPolicy.redis.jobQueueNamespaces, else operator.watchNamespaces; empty for every namespace.
kubernetes.io/metadata.name is set by the API server on every namespace and cannot be changed.
*/}}
{{- define "antre.networkPolicy.jobQueueNamespaces" -}}
{{- $names := .Values.networkPolicy.redis.jobQueueNamespaces | default .Values.operator.watchNamespaces }}
{{- if $names -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: In
    values:
      {{- toYaml $names | nindent 6 }}
{{- end }}
{{- end }}

{{/*
The podSelector of the pods the operator renders for JobQueues (antre_operator.rendering): the
workers, the reaper's Jobs and the API.
*/}}
{{- define "antre.networkPolicy.jobQueuePods" -}}
matchLabels:
  app.kubernetes.io/name: antre
  app.kubernetes.io/managed-by: antre-operator
matchExpressions:
  - key: app.kubernetes.io/component
    operator: In
    values: [worker, reaper, api]
{{- end }}

{{/*
The example JobQueue's spec.api.tokenSecretRef as YAML (use with fromYaml): the spec's own,
else exampleJobQueue.apiToken.existingSecret, else the Secret the chart generates. Naming it
twice is refused, so that no value is silently ignored.
*/}}
{{- define "antre.example.apiTokenRef" -}}
{{- $api := .Values.exampleJobQueue.spec.api | default dict }}
{{- $existing := .Values.exampleJobQueue.apiToken.existingSecret }}
{{- if and $api.tokenSecretRef $existing }}
{{- fail "exampleJobQueue.apiToken.existingSecret and exampleJobQueue.spec.api.tokenSecretRef both name the API token's Secret: set only one" }}
{{- end }}
{{- if $api.tokenSecretRef }}
{{- toYaml $api.tokenSecretRef }}
{{- else if $existing }}
{{- toYaml (dict "name" $existing "key" .Values.exampleJobQueue.apiToken.existingSecretKey) }}
{{- else }}
{{- toYaml (dict "name" (include "antre.example.apiTokenSecretName" .) "key" "token") }}
{{- end }}
{{- end }}

{{/*
The annotations of the example's uninstall hook objects. Call with the hook weight: helm creates
hooks of a lower weight first (ServiceAccount and Role, the RoleBinding, then the Job), and
deletes them all once the Job has succeeded or before the next try.
*/}}
{{- define "antre.example.uninstallHook" -}}
helm.sh/hook: pre-delete
helm.sh/hook-weight: {{ . | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/*
"true" when the chart generates the example JobQueue's API token Secret, else "".
*/}}
{{- define "antre.example.generatesApiToken" -}}
{{- $api := .Values.exampleJobQueue.spec.api | default dict }}
{{- if and .Values.exampleJobQueue.enabled $api.enabled (not $api.tokenSecretRef) (not .Values.exampleJobQueue.apiToken.existingSecret) }}true{{ end }}
{{- end }}

{{/*
"true" when `helm uninstall` deletes the example JobQueue through its pre-delete hook: the hook
creates a Role of its own, so only where the chart creates RBAC (operator.rbac.create).
*/}}
{{- define "antre.example.uninstallHookRendered" -}}
{{- if and .Values.exampleJobQueue.enabled .Values.exampleJobQueue.uninstallHook.enabled .Values.operator.rbac.create }}true{{- end }}
{{- end }}
