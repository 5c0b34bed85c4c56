"""Scaling rules: which templates are active now (`window`, `cron`, `templates`), the
`scaling evaluate` command (`evaluate`), and the reconcile loop that applies and reverts
windows on HPAs (`reconcile`, run by `job`; `revertall` for `scaling revert-all`)."""
