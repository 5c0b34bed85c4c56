"""Scaling rules: which templates are active now (`window`, `cron`, `templates`), and the
`scaling evaluate` command (`evaluate`)."""
