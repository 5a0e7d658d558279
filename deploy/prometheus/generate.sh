#!/bin/sh
# Writes prometheusrule.yaml from rules.yaml, the one copy of the alerts:
# edit rules.yaml, run this, commit both. tests/integration/prometheus.rs
# fails when the two differ.
set -eu
cd "$(dirname "$0")"
{
  cat <<'HEAD'
# GENERATED from rules.yaml by ./generate.sh; edit rules.yaml instead.
# For the Prometheus Operator, through the optional kustomize component
# ../components/prometheus-operator (and the Helm chart's
# prometheusOperator.enabled); without it, load rules.yaml into
# Prometheus's rule_files (deploy/README.md "Dashboard and alerts").
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: podns
  labels:
    app.kubernetes.io/name: podns
spec:
HEAD
  # rules.yaml minus its header comment, indented under spec.
  grep -v '^#' rules.yaml | sed 's/^\(.\)/  \1/'
} >prometheusrule.yaml
# The Helm chart cannot read outside its directory: it gets a copy.
cp rules.yaml ../helm/podns/files/rules.yaml
