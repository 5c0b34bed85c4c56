"""Kubernetes access, shared by every role, command and hook: which cluster (`cluster`),
the one HTTP client (`api`) with its one error tree (`errors`), the permission a request
needs (`permission`), how a write is asked for (`writes`: options, preconditions), the
resources written (`resources`), lists read page by page (`pages`), Events about an object
(`recorder`) and the `IGNORE_RESOURCES` glob grammar (`globs`).

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
