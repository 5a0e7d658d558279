#!/usr/bin/env python3
"""Bytes of one EndpointSlice watch event (a full slice of 100 endpoints,
as the EndpointSlice controller writes for a headless training Service),
for the CoreDNS comparison in deploy/README.md. Computed, not measured: the
simulator serves no EndpointSlices. Field values have realistic lengths
(GKE-style node names, UUIDs, managedFields as kube-controller-manager
writes them)."""
import json

uid = "3f0c8a8e-1c2d-4e5f-9a0b-1c2d3e4f5a6b"
eps = [{
    "addresses": [f"10.244.{i // 250}.{i % 250 + 1}"],
    "conditions": {"ready": True, "serving": True, "terminating": False},
    "hostname": f"train-0-{i}",
    "targetRef": {"kind": "Pod", "namespace": "default", "name": f"train-0-{i}-x7k2p", "uid": uid},
    "nodeName": f"gke-cluster-a3-highgpu-pool-{i:05d}-abcd",
    "zone": "us-central1-a",
} for i in range(100)]
fields = {"f:addressType": {}, "f:endpoints": {}, "f:ports": {}, "f:metadata": {
    "f:annotations": {".": {}, "f:endpoints.kubernetes.io/last-change-trigger-time": {}},
    "f:generateName": {},
    "f:labels": {".": {}, "f:endpointslice.kubernetes.io/managed-by": {},
                 "f:kubernetes.io/service-name": {}, "f:service.kubernetes.io/headless": {}},
    "f:ownerReferences": {".": {}, f'k:{{"uid":"{uid}"}}': {}}}}
slice_ = {
    "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
    "metadata": {
        "name": "train-0-abcde", "generateName": "train-0-", "namespace": "default", "uid": uid,
        "resourceVersion": "123456789", "generation": 42, "creationTimestamp": "2026-01-01T00:00:00Z",
        "labels": {"endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
                   "kubernetes.io/service-name": "train-0", "service.kubernetes.io/headless": ""},
        "annotations": {"endpoints.kubernetes.io/last-change-trigger-time": "2026-01-01T00:00:00Z"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "train-0", "uid": uid,
                             "controller": True, "blockOwnerDeletion": True}],
        "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                           "apiVersion": "discovery.k8s.io/v1", "time": "2026-01-01T00:00:00Z",
                           "fieldsType": "FieldsV1", "fieldsV1": fields}],
    },
    "addressType": "IPv4", "endpoints": eps,
    "ports": [{"name": "nccl", "port": 29500, "protocol": "TCP"}],
}
event = json.dumps({"type": "MODIFIED", "object": slice_}, separators=(",", ":"))
print(json.dumps({"slice_event_bytes": len(event),
                  "bytes_per_endpoint": len(json.dumps(eps[0], separators=(",", ":")))}))
