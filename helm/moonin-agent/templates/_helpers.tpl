{{/* Names, labels and the pieces both agent workloads share. */}}

{{- define "moonin-agent.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
42 characters leave room for the suffixes within the 63 that names and label values
allow: "-revert-scaling" on the hook Job, and "-discovery" on the StatefulSet, whose name
must stay within 52 since its pods' controller-revision-hash label adds up to 11.
*/}}
{{- define "moonin-agent.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 42 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 42 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "moonin-agent.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "moonin-agent.labels" -}}
helm.sh/chart: {{ include "moonin-agent.chart" . }}
app.kubernetes.io/name: {{ include "moonin-agent.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: moonin
{{- end }}

{{- define "moonin-agent.selectorLabels" -}}
app.kubernetes.io/name: {{ include "moonin-agent.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/* Labels of one component: (dict "root" $ "component" "discovery") */}}
{{- define "moonin-agent.componentLabels" -}}
{{ include "moonin-agent.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "moonin-agent.image" -}}
{{- printf "%s:%s" .Values.image.repository (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}

{{- define "moonin-agent.serviceAccountName" -}}
{{- $settings := index .root.Values .component }}
{{- if $settings.serviceAccount.create }}
{{- default (printf "%s-%s" (include "moonin-agent.fullname" .root) .component) $settings.serviceAccount.name }}
{{- else }}
{{- required (printf "%s.serviceAccount.name is required when %s.serviceAccount.create is false" .component .component) $settings.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The Secret both roles read; with create=false it must already exist. */}}
{{- define "moonin-agent.credentialsSecret" -}}
{{- required "global.credentialsSecretName is required" .Values.global.credentialsSecretName }}
{{- end }}

{{- define "moonin-agent.configMapName" -}}
{{- printf "%s-config" (include "moonin-agent.fullname" .) }}
{{- end }}

{{- define "moonin-agent.scalingDeploymentName" -}}
{{- printf "%s-scaling" (include "moonin-agent.fullname" .) }}
{{- end }}

{{/* The Lease the discovery replicas elect a leader with (collector/leader.py). */}}
{{- define "moonin-agent.leaseName" -}}
moonin-discovery-leader
{{- end }}

{{- define "moonin-agent.configMountDir" -}}/etc/moonin-agent{{- end }}
{{- define "moonin-agent.tokenMountDir" -}}/var/run/secrets/moonin{{- end }}

{{/* The checksums that roll the pods when their configuration or credentials change. */}}
{{- define "moonin-agent.checksums" -}}
checksum/config: {{ include (print .Template.BasePath "/configmap.yaml") . | sha256sum }}
{{- if .Values.global.clusterCredentials.create }}
checksum/credentials: {{ include (print .Template.BasePath "/secret.yaml") . | sha256sum }}
{{- end }}
{{- end }}

{{/*
The environment of an agent container: (dict "root" $ "role" "discovery").
The token is given twice: CLUSTER_TOKEN for parity with Moonin's chart, and
CLUSTER_TOKEN_FILE, which wins and is re-read, so a rotated Secret needs no restart.
*/}}
{{- define "moonin-agent.env" -}}
{{- $root := .root }}
{{- $secret := include "moonin-agent.credentialsSecret" $root }}
{{- $settings := index $root.Values .role -}}
- name: PROJECT_ID
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: PROJECT_ID
- name: CLUSTER_ID
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: CLUSTER_ID
- name: CLUSTER_TOKEN
  valueFrom:
    secretKeyRef:
      name: {{ $secret }}
      key: CLUSTER_TOKEN
- name: CLUSTER_TOKEN_FILE
  value: {{ include "moonin-agent.tokenMountDir" $root }}/CLUSTER_TOKEN
- name: API_URL
  value: {{ $settings.apiUrl | quote }}
- name: CONFIG_FILE
  value: {{ include "moonin-agent.configMountDir" $root }}/config.yaml
- name: QUEUE_DIR
  value: {{ $root.Values.queue.path | quote }}
- name: HEALTH_ADDR
  value: {{ printf "%s:%v" $root.Values.health.bindAddress (int $root.Values.health.port) | quote }}
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: MALLOC_ARENA_MAX
  value: "2"
{{- if $root.Values.config.caBundle }}
- name: MOONIN_CA_BUNDLE
  value: {{ include "moonin-agent.configMountDir" $root }}/ca.crt
{{- end }}
{{- if eq .role "discovery" }}
- name: LEADER_ELECTION
  value: {{ ternary "true" "false" $settings.leaderElection | quote }}
{{- else }}
- name: RECONCILE_INTERVAL_SECONDS
  value: {{ $settings.reconcileIntervalSeconds | toString | quote }}
- name: GITOPS_CONFLICTS
  value: {{ $settings.gitopsConflicts | quote }}
- name: REASSERT_SECONDS
  value: {{ $settings.reassertSeconds | toString | quote }}
{{- end }}
{{- with $settings.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/* Mounts of an agent container; the queue volume is named "queue" by each workload. */}}
{{- define "moonin-agent.volumeMounts" -}}
- name: config
  mountPath: {{ include "moonin-agent.configMountDir" . }}
  readOnly: true
- name: credentials
  mountPath: {{ include "moonin-agent.tokenMountDir" . }}
  readOnly: true
- name: queue
  mountPath: {{ .Values.queue.path }}
- name: tmp
  mountPath: /tmp
{{- end }}

{{/* The volumes every agent pod has besides its queue. */}}
{{- define "moonin-agent.commonVolumes" -}}
- name: config
  configMap:
    name: {{ include "moonin-agent.configMapName" . }}
- name: credentials
  secret:
    secretName: {{ include "moonin-agent.credentialsSecret" . }}
    items:
      - key: CLUSTER_TOKEN
        path: CLUSTER_TOKEN
    defaultMode: 0440
- name: tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end }}

{{- define "moonin-agent.claimSpec" -}}
accessModes:
  {{- toYaml .Values.persistence.accessModes | nindent 2 }}
{{- with .Values.persistence.storageClassName }}
storageClassName: {{ eq . "-" | ternary "" . | quote }}
{{- end }}
resources:
  requests:
    storage: {{ .Values.persistence.size }}
{{- end }}

{{/* Probes on the health port; only long-running workloads get them. */}}
{{- define "moonin-agent.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: http-health
  periodSeconds: 2
  failureThreshold: 60
livenessProbe:
  httpGet:
    path: /healthz
    port: http-health
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: /readyz
    port: http-health
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end }}

{{/* Scheduling and identity every pod of the chart shares. */}}
{{- define "moonin-agent.podCommon" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.priorityClassName }}
priorityClassName: {{ . }}
{{- end }}
{{- with .Values.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The pod template of an agent workload: (dict "root" $ "role" "discovery" "queueClaim" "").
The queue volume is an emptyDir, or the claim named by queueClaim; "-" leaves it to the
StatefulSet's volumeClaimTemplates.
*/}}
{{- define "moonin-agent.podTemplate" -}}
{{- $root := .root }}
{{- $settings := index $root.Values .role -}}
metadata:
  labels:
    {{- include "moonin-agent.componentLabels" (dict "root" $root "component" .role) | nindent 4 }}
    {{- with $root.Values.podLabels }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  annotations:
    {{- include "moonin-agent.checksums" $root | nindent 4 }}
    {{- with $root.Values.podAnnotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  serviceAccountName: {{ include "moonin-agent.serviceAccountName" (dict "root" $root "component" .role) }}
  automountServiceAccountToken: true
  terminationGracePeriodSeconds: {{ $settings.terminationGracePeriodSeconds }}
  {{- include "moonin-agent.podCommon" $root | nindent 2 }}
  {{- if $root.Values.affinity }}
  affinity:
    {{- toYaml $root.Values.affinity | nindent 4 }}
  {{- else if and (eq .role "discovery") (ne $settings.podAntiAffinity "none") }}
  affinity:
    podAntiAffinity:
      {{- $term := dict "topologyKey" "kubernetes.io/hostname" "labelSelector" (dict "matchLabels" (include "moonin-agent.selectorLabels" (dict "root" $root "component" .role) | fromYaml)) }}
      {{- if eq $settings.podAntiAffinity "hard" }}
      requiredDuringSchedulingIgnoredDuringExecution:
        {{- toYaml (list $term) | nindent 8 }}
      {{- else }}
      preferredDuringSchedulingIgnoredDuringExecution:
        {{- toYaml (list (dict "weight" 100 "podAffinityTerm" $term)) | nindent 8 }}
      {{- end }}
  {{- end }}
  containers:
    - name: agent
      image: {{ include "moonin-agent.image" $root }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      args: ["run", "--role", {{ .role | quote }}]
      ports:
        - name: http-health
          containerPort: {{ $root.Values.health.port }}
          protocol: TCP
      env:
        {{- include "moonin-agent.env" (dict "root" $root "role" .role) | nindent 8 }}
      volumeMounts:
        {{- include "moonin-agent.volumeMounts" $root | nindent 8 }}
      {{- include "moonin-agent.probes" $root | nindent 6 }}
      resources:
        {{- toYaml $settings.resources | nindent 8 }}
      securityContext:
        {{- toYaml $root.Values.securityContext | nindent 8 }}
  volumes:
    {{- include "moonin-agent.commonVolumes" $root | nindent 4 }}
    {{- if not .queueClaim }}
    - name: queue
      emptyDir:
        sizeLimit: {{ $root.Values.queue.sizeLimit }}
    {{- else if ne .queueClaim "-" }}
    - name: queue
      persistentVolumeClaim:
        claimName: {{ .queueClaim }}
    {{- end }}
{{- end }}

{{/* A map of labels as a selector string: {"a": "1", "b": "2"} -> a=1,b=2 */}}
{{- define "moonin-agent.selectorString" -}}
{{- $pairs := list }}
{{- range $key, $value := . }}
{{- $pairs = append $pairs (printf "%s=%s" $key $value) }}
{{- end }}
{{- join "," $pairs }}
{{- end }}

{{/*
A credential as text. Helm reads numbers as floats and would print the id 1234567 as
1.234567e+06; JSON prints whole numbers whole.
*/}}
{{- define "moonin-agent.text" -}}
{{- if kindIs "string" . }}{{ . }}{{ else }}{{ toJson . }}{{ end }}
{{- end }}
