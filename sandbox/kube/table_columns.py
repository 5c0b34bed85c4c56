"""The column definitions of the tables kube-apiserver prints, as it sends them: names,
types, priorities and the descriptions its printers take from the API documentation
(pkg/printers/internalversion/printers.go), copied from a v1.36 server. `tables` fills the
cells."""

from __future__ import annotations

from typing import Any

NAME = {
    "name": "Name",
    "type": "string",
    "format": "name",
    "description": (
        "Name must be unique within a namespace. Is required when creating resources, although "
        "some resources may allow a client to request the generation of an appropriate name "
        "automatically. Name is primarily intended for creation idempotence and configuration "
        "definition. Cannot be updated. More info: "
        "https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names"
    ),
    "priority": 0,
}

AGE_DESCRIPTION = (
    "CreationTimestamp is a timestamp representing the server time when this object was created. "
    "It is not guaranteed to be set in happens-before order across separate operations. Clients "
    "may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the "
    "system. Read-only. Null for lists. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)


def _column(name: str, description: str, kind: str = "string", priority: int = 0) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "format": "",
        "description": description,
        "priority": priority,
    }


_AGE = _column("Age", AGE_DESCRIPTION)

# By (group, plural), the columns after Name.
COLUMNS: dict[tuple[str, str], list[dict[str, Any]]] = {
    ("apps", "deployments"): [
        _column("Ready", "Number of the pod with ready state"),
        _column(
            "Up-to-date",
            (
                "Total number of non-terminating pods targeted by this deployment that have the "
                "desired template spec."
            ),
        ),
        _column(
            "Available",
            (
                "Total number of available non-terminating pods (ready for at least "
                "minReadySeconds) targeted by this deployment."
            ),
        ),
        _AGE,
        _column("Containers", "Names of each container in the template.", priority=1),
        _column("Images", "Images referenced by each container in the template.", priority=1),
        _column(
            "Selector",
            (
                "Label selector for pods. Existing ReplicaSets whose pods are selected by this "
                "will be the ones affected by this deployment. It must match the pod template's "
                "labels."
            ),
            priority=1,
        ),
    ],
    ("apps", "replicasets"): [
        _column(
            "Desired",
            (
                "Replicas is the number of desired pods. This is a pointer to distinguish "
                "between explicit zero and unspecified. Defaults to 1. More info: "
                "https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"
            ),
            kind="integer",
        ),
        _column(
            "Current",
            (
                "Replicas is the most recently observed number of non-terminating pods. More "
                "info: https://kubernetes.io/docs/concepts/workloads/controllers/replicaset"
            ),
            kind="integer",
        ),
        _column(
            "Ready",
            (
                "The number of non-terminating pods targeted by this ReplicaSet with a Ready "
                "Condition."
            ),
            kind="integer",
        ),
        _AGE,
        _column("Containers", "Names of each container in the template.", priority=1),
        _column("Images", "Images referenced by each container in the template.", priority=1),
        _column(
            "Selector",
            (
                "Selector is a label query over pods that should match the replica count. Label "
                "keys and values that must match in order to be controlled by this replica set. "
                "It must match the pod template's labels. More info: "
                "https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/#label-"
                "selectors"
            ),
            priority=1,
        ),
    ],
    ("", "pods"): [
        _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
        _column("Status", "The aggregate status of the containers in this pod."),
        _column(
            "Restarts",
            (
                "The number of times the containers in this pod have been restarted and when the "
                "last container in this pod has restarted."
            ),
        ),
        _AGE,
        _column(
            "IP",
            (
                "podIP address allocated to the pod. Routable at least within the cluster. Empty "
                "if not yet allocated."
            ),
            priority=1,
        ),
        _column(
            "Node",
            (
                "NodeName indicates in which node this pod is scheduled. If empty, this pod is a "
                "candidate for scheduling by the scheduler defined in schedulerName. Once this "
                "field is set, the kubelet for this node becomes responsible for the lifecycle "
                "of this pod. This field should not be used to express a desire for the pod to "
                "be scheduled on a specific node. "
                "https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#nodenam"
                "e"
            ),
            priority=1,
        ),
        _column(
            "Nominated Node",
            (
                "nominatedNodeName is set only when this pod preempts other pods on the node, "
                "but it cannot be scheduled right away as preemption victims receive their "
                "graceful termination periods. This field does not guarantee that the pod will "
                "be scheduled on this node. Scheduler may decide to place the pod elsewhere if "
                "other nodes become available sooner. Scheduler may also decide to give the "
                "resources on this node to a higher priority pod that is created after "
                "preemption. As a result, this field may be different than PodSpec.nodeName when "
                "the pod is scheduled."
            ),
            priority=1,
        ),
        _column(
            "Readiness Gates",
            (
                "If specified, all readiness gates will be evaluated for pod readiness. A pod is "
                "ready when all its containers are ready AND all conditions specified in the "
                'readiness gates have status equal to "True" More info: '
                "https://git.k8s.io/enhancements/keps/sig-network/580-pod-readiness-gates"
            ),
            priority=1,
        ),
    ],
    ("", "namespaces"): [
        _column("Status", "The status of the namespace"),
        _AGE,
    ],
    ("autoscaling", "horizontalpodautoscalers"): [
        _column(
            "Reference",
            (
                "scaleTargetRef points to the target resource to scale, and is used to the pods "
                "for which metrics should be collected, as well as to actually change the "
                "replica count."
            ),
        ),
        _column(
            "Targets",
            (
                "metrics contains the specifications for which to use to calculate the desired "
                "replica count (the maximum replica count across all metrics will be used).  The "
                "desired replica count is calculated multiplying the ratio between the target "
                "value and the current value by the current number of pods.  Ergo, metrics used "
                "must decrease as the pod count is increased, and vice-versa.  See the "
                "individual metric source types for more information about how each type of "
                "metric must respond. If not set, the default metric will be set to 80% average "
                "CPU utilization."
            ),
        ),
        _column(
            "MinPods",
            (
                "minReplicas is the lower limit for the number of replicas to which the "
                "autoscaler can scale down.  It defaults to 1 pod.  minReplicas is allowed to be "
                "0 if the alpha feature gate HPAScaleToZero is enabled and at least one Object "
                "or External metric is configured.  Scaling is active as long as at least one "
                "metric value is available."
            ),
        ),
        _column(
            "MaxPods",
            (
                "maxReplicas is the upper limit for the number of replicas to which the "
                "autoscaler can scale up. It cannot be less that minReplicas."
            ),
        ),
        _column(
            "Replicas",
            (
                "currentReplicas is current number of replicas of pods managed by this "
                "autoscaler, as last seen by the autoscaler."
            ),
        ),
        _AGE,
    ],
    ("", "configmaps"): [
        _column(
            "Data",
            (
                "Data contains the configuration data. Each key must consist of alphanumeric "
                "characters, '-', '_' or '.'. Values with non-UTF-8 byte sequences must use the "
                "BinaryData field. The keys stored in Data must not overlap with the keys in the "
                "BinaryData field, this is enforced during validation process."
            ),
        ),
        _AGE,
    ],
    ("", "secrets"): [
        _column(
            "Type",
            (
                "Used to facilitate programmatic handling of secret data. More info: "
                "https://kubernetes.io/docs/concepts/configuration/secret/#secret-types"
            ),
        ),
        _column(
            "Data",
            (
                "Data contains the secret data. Each key must consist of alphanumeric "
                "characters, '-', '_' or '.'. The serialized form of the secret data is a base64 "
                "encoded string, representing the arbitrary (possibly non-string) data value "
                "here. Described in https://tools.ietf.org/html/rfc4648#section-4"
            ),
        ),
        _AGE,
    ],
    ("coordination.k8s.io", "leases"): [
        _column(
            "Holder",
            (
                "holderIdentity contains the identity of the holder of a current lease. If "
                "Coordinated Leader Election is used, the holder identity must be equal to the "
                "elected LeaseCandidate.metadata.name field."
            ),
        ),
        _AGE,
    ],
    ("", "services"): [
        _column(
            "Type",
            (
                "type determines how the Service is exposed. Defaults to ClusterIP. Valid "
                'options are ExternalName, ClusterIP, NodePort, and LoadBalancer. "ClusterIP" '
                "allocates a cluster-internal IP address for load-balancing to endpoints. "
                "Endpoints are determined by the selector or if that is not specified, by manual "
                "construction of an Endpoints object or EndpointSlice objects. If clusterIP is "
                '"None", no virtual IP is allocated and the endpoints are published as a set of '
                'endpoints rather than a virtual IP. "NodePort" builds on ClusterIP and '
                "allocates a port on every node which routes to the same endpoints as the "
                'clusterIP. "LoadBalancer" builds on NodePort and creates an external '
                "load-balancer (if supported in the current cloud) which routes to the same "
                'endpoints as the clusterIP. "ExternalName" aliases this service to the '
                "specified externalName. Several other fields do not apply to ExternalName "
                "services. More info: https://kubernetes.io/docs/concepts/services-networking/ser"
                "vice/#publishing-services-service-types"
            ),
        ),
        _column(
            "Cluster-IP",
            (
                "clusterIP is the IP address of the service and is usually assigned randomly. If "
                "an address is specified manually, is in-range (as per system configuration), "
                "and is not in use, it will be allocated to the service; otherwise creation of "
                "the service will fail. This field may not be changed through updates unless the "
                "type field is also being changed to ExternalName (which requires this field to "
                "be blank) or the type field is being changed from ExternalName (in which case "
                "this field may optionally be specified, as describe above).  Valid values are "
                '"None", empty string (""), or a valid IP address. Setting this to "None" makes '
                'a "headless service" (no virtual IP), which is useful when direct endpoint '
                "connections are preferred and proxying is not required.  Only applies to types "
                "ClusterIP, NodePort, and LoadBalancer. If this field is specified when creating "
                "a Service of type ExternalName, creation will fail. This field will be wiped "
                "when updating a Service to type ExternalName. More info: "
                "https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and"
                "-service-proxies"
            ),
        ),
        _column(
            "External-IP",
            (
                "externalIPs is a list of IP addresses for which nodes in the cluster will also "
                "accept traffic for this service.  These IPs are not managed by Kubernetes.  The "
                "user is responsible for ensuring that traffic arrives at a node with this IP.  "
                "A common example is external load-balancers that are not part of the Kubernetes "
                "system."
            ),
        ),
        _column(
            "Port(s)",
            (
                "The list of ports that are exposed by this service. More info: "
                "https://kubernetes.io/docs/concepts/services-networking/service/#virtual-ips-and"
                "-service-proxies"
            ),
        ),
        _AGE,
        _column(
            "Selector",
            (
                "Route service traffic to pods with label keys and values matching this "
                "selector. If empty or not present, the service is assumed to have an external "
                "process managing its endpoints, which Kubernetes will not modify. Only applies "
                "to types ClusterIP, NodePort, and LoadBalancer. Ignored if type is "
                "ExternalName. More info: "
                "https://kubernetes.io/docs/concepts/services-networking/service/"
            ),
            priority=1,
        ),
    ],
}
# The default convertor's, for every other kind.
DEFAULT = [_column("Created At", AGE_DESCRIPTION, kind="date")]
