{{/*
Names. Object names are "<release>-<chart>" (or fullnameOverride), cut to
63 characters, the longest a label value or DNS label may be.
*/}}
{{- define "flps.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "flps.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* A component's name: "<fullname>-<component>", within 63 characters. */}}
{{- define "flps.component" -}}
{{- printf "%s-%s" (include "flps.fullname" .root | trunc (int (sub 62 (len .name))) | trimSuffix "-") .name -}}
{{- end -}}

{{- define "flps.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every object. */}}
{{- define "flps.labels" -}}
helm.sh/chart: {{ include "flps.chart" . }}
{{ include "flps.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "flps.selectorLabels" -}}
app.kubernetes.io/name: {{ include "flps.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{/* Labels of one component: call with (dict "root" $ "component" "scheduler"). */}}
{{- define "flps.componentLabels" -}}
{{ include "flps.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "flps.componentSelectorLabels" -}}
{{ include "flps.selectorLabels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "flps.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "flps.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "flps.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The scheduler's Service name and in-cluster URL. */}}
{{- define "flps.schedulerService" -}}
{{- include "flps.component" (dict "root" . "name" "scheduler") -}}
{{- end -}}

{{- define "flps.schedulerUrl" -}}
{{- printf "%s://%s.%s.svc:%d" (include "flps.schedulerScheme" .) (include "flps.schedulerService" .) .Release.Namespace (int .Values.scheduler.port) -}}
{{- end -}}

{{/* https when flsched serves TLS from scheduler.tls.existingSecret. */}}
{{- define "flps.schedulerScheme" -}}
{{- if .Values.scheduler.tls.existingSecret -}}https{{- else -}}http{{- end -}}
{{- end -}}

{{/* Secrets: the API token, and Redis's password. */}}
{{- define "flps.authSecretName" -}}
{{- if .Values.auth.existingSecret -}}
{{- .Values.auth.existingSecret -}}
{{- else -}}
{{- include "flps.component" (dict "root" . "name" "auth") -}}
{{- end -}}
{{- end -}}

{{- define "flps.authSecretKey" -}}
{{- if .Values.auth.existingSecret -}}{{ .Values.auth.existingSecretKey }}{{- else -}}token{{- end -}}
{{- end -}}

{{/* The Secret holding Redis's password; empty when there is none. */}}
{{- define "flps.redisSecretName" -}}
{{- if .Values.redis.enabled -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else -}}
{{- include "flps.component" (dict "root" . "name" "redis") -}}
{{- end -}}
{{- else -}}
{{- .Values.redis.external.existingSecret -}}
{{- end -}}
{{- end -}}

{{- define "flps.redisSecretKey" -}}
{{- if .Values.redis.enabled -}}
{{- if .Values.redis.existingSecret -}}{{ .Values.redis.existingSecretPasswordKey }}{{- else -}}redis-password{{- end -}}
{{- else -}}
{{- .Values.redis.external.passwordKey -}}
{{- end -}}
{{- end -}}

{{/*
The --redis URL of flsched and flagent. The password is never written into
the manifest: Kubernetes expands $(FLPS_REDIS_PASSWORD) from the container's
environment, which takes it from the Secret.
*/}}
{{- define "flps.redisUrl" -}}
{{- $auth := "" -}}
{{- if and (include "flps.redisSecretName" .) .Values.redis.passwordInUrl -}}
{{- $auth = ":$(FLPS_REDIS_PASSWORD)@" -}}
{{- end -}}
{{- if .Values.redis.enabled -}}
{{- printf "redis://%s%s.%s.svc:%d/0" $auth (include "flps.component" (dict "root" . "name" "redis")) .Release.Namespace (int .Values.redis.port) -}}
{{- else -}}
{{- if not .Values.redis.external.url -}}
{{- fail "redis.enabled is false: set redis.external.url (redis://HOST[:PORT][/DB])" -}}
{{- end -}}
{{- $scheme := ternary "rediss://" "redis://" (hasPrefix "rediss://" .Values.redis.external.url) -}}
{{- printf "%s%s%s" $scheme $auth (trimPrefix $scheme .Values.redis.external.url) -}}
{{- end -}}
{{- end -}}

{{/*
How flsched and flagent get Redis's password: a file of the Secret, mounted
readable by root and the pods' fsGroup only (never by the tasks flagent
runs as uids of their own), named by FLPS_REDIS_PASSWORD_FILE. Only
redis.passwordInUrl puts it into the environment, which the URL needs for
$(FLPS_REDIS_PASSWORD); flagent wipes it from its environment at start.
*/}}
{{- define "flps.redisEnv" -}}
{{- if include "flps.redisSecretName" . -}}
{{- if .Values.redis.passwordInUrl -}}
- name: FLPS_REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "flps.redisSecretName" . }}
      key: {{ include "flps.redisSecretKey" . }}
{{- else -}}
- name: FLPS_REDIS_PASSWORD_FILE
  value: /etc/flps/redis/password
{{- end }}
{{- end }}
{{- end -}}
{{- define "flps.redisPasswordMount" -}}
{{- if and (include "flps.redisSecretName" .) (not .Values.redis.passwordInUrl) -}}
- name: redis-password
  mountPath: /etc/flps/redis
  readOnly: true
{{- end -}}
{{- end -}}
{{- define "flps.redisPasswordVolume" -}}
{{- if and (include "flps.redisSecretName" .) (not .Values.redis.passwordInUrl) -}}
- name: redis-password
  secret:
    secretName: {{ include "flps.redisSecretName" . }}
    defaultMode: 0440
    items:
      - key: {{ include "flps.redisSecretKey" . }}
        path: password
{{- end -}}
{{- end -}}

{{/* rediss:// to an external Redis with its CA from redis.external.caSecret:
     the variable, the mount and the volume flsched and flagent get. */}}
{{- define "flps.redisCa" -}}
{{- if and (not .Values.redis.enabled) .Values.redis.external.caSecret (hasPrefix "rediss://" .Values.redis.external.url) -}}yes{{- end -}}
{{- end -}}
{{- define "flps.redisCaEnv" -}}
- name: FLPS_REDIS_CA
  value: /etc/flps/redis-ca/ca.crt
{{- end -}}
{{- define "flps.redisCaMount" -}}
- name: redis-ca
  mountPath: /etc/flps/redis-ca
  readOnly: true
{{- end -}}
{{- define "flps.redisCaVolume" -}}
- name: redis-ca
  secret:
    secretName: {{ .Values.redis.external.caSecret }}
    items:
      - key: {{ .Values.redis.external.caKey }}
        path: ca.crt
{{- end -}}

{{/* Pod-level security context of every pod. */}}
{{- define "flps.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.runAsUser }}
runAsGroup: {{ .Values.runAsGroup }}
fsGroup: {{ .Values.fsGroup }}
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container security context: no privilege, no capability, read-only root. */}}
{{- define "flps.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.runAsUser }}
runAsGroup: {{ .Values.runAsGroup }}
allowPrivilegeEscalation: false
privileged: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
{{- end -}}

{{/* The value of a chart-made Secret key: the one given in the values, else the one already in the cluster (kept on upgrades), else a new random one. */}}
{{- define "flps.secretValue" -}}
{{- $given := .given -}}
{{- if $given -}}
{{- $given -}}
{{- else -}}
{{- $old := lookup "v1" "Secret" .root.Release.Namespace .name -}}
{{- if and $old $old.data (hasKey $old.data .key) -}}
{{- index $old.data .key | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The claim the job pods' shards checkpoint on (launcher: kubernetes);
     empty: none. */}}
{{- define "flps.jobCheckpointClaim" -}}
{{- $ck := .Values.kubernetes.checkpoints -}}
{{- if $ck.enabled -}}
{{- default (include "flps.component" (dict "root" . "name" "checkpoints")) $ck.existingClaim -}}
{{- end -}}
{{- end -}}

{{/* The prefix of the job objects' names: the release's, short enough for
     the pods' host names (flsched --k8s-prefix takes 24). */}}
{{- define "flps.jobPrefix" -}}
{{- include "flps.fullname" . | trunc 24 | trimSuffix "-" -}}
{{- end -}}
