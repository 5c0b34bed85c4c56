"""Kubernetes access, shared by every role and command: which cluster (`cluster`), the
streaming HTTP client discovery reads with (`api`), the official client the scaling role
writes with (`official`), one error tree for both (`errors`), the permission a request
needs (`permission`) and the `IGNORE_RESOURCES` glob grammar (`globs`).

Which cluster, the one rule for `run` (every role), `preview` and the `scaling` commands,
as kubectl chooses it (an explicit flag wins over what the environment implies):

1. `--kubeconfig FILE`: that file, its context `--context` or else its current-context;
2. else `--context NAME`: that context of the kubeconfig from `KUBECONFIG` or
   `~/.kube/config`, even inside a pod;
3. else inside a pod (`KUBERNETES_SERVICE_HOST` set): the pod's service account;
4. else the current-context of `KUBECONFIG`'s kubeconfig, or of `~/.kube/config`.

A `KUBECONFIG` list is merged as kubectl merges it (`cluster._from_kubeconfig`).

Nothing here reads the process environment: the caller (`agent`) passes it in.
"""
