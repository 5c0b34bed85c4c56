"""A fake Kubernetes API server that speaks the real HTTP protocol on 127.0.0.1.

The official `kubernetes` client and the agent's own informers run against it unchanged:
list with `limit`/`continue`, watch with bookmarks and `timeoutSeconds`, streaming lists
(`sendInitialEvents`), metadata-only answers (`as=PartialObjectMetadata`), 410 Expired in
both of its forms, create/get/replace/patch/delete with Status answers, `pods/log`,
`/version` and discovery. Tests drive it from Python (objects, faults, request log), and
`python -m sandbox.kube` serves it, optionally with a large synthetic cluster, for
benchmarks.

    with FakeKube() as kube:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}})
        api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(kube.client_configuration()))
"""

from sandbox.kube.fake import FakeKube
from sandbox.kube.faults import RequestRecord
from sandbox.kube.status import ApiError

__all__ = ["ApiError", "FakeKube", "RequestRecord"]
