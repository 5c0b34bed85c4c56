"""The API resources the agent writes, and the paths that reach them.

One place builds `/apis/<group>/<version>[/namespaces/<ns>]/<plural>[/<name>]`, so a path is
never spelt by hand where a call is made (and the permission a 403 names, derived from the
path by `kube.permission`, always matches the resource meant).

How it fails: nothing here fails.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Resource:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        """The collection (of one namespace, or of the cluster), or one object in it."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        scope = f"{root}/namespaces/{namespace}" if namespace else root
        collection = f"{scope}/{self.plural}"
        return f"{collection}/{name}" if name else collection


DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
HPAS = Resource("autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler")
EVENTS = Resource("", "v1", "events", "Event")
