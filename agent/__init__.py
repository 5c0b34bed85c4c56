"""The thin wiring: config, CLI, health/metrics, process roles, shutdown. Nothing imports agent."""
