"""The roles of the Ray system as plain classes (no Ray import here): the rollout worker (actors.rollout; its config
in actors.config, the env factory in actors.envs, the episodes' totals in actors.episode_stats), its
wire format (actors.wire) and the monitor with the kill rules (actors.monitor, actors.kill_rules), the diag.jsonl it
writes and every reader reads (actors.diag_file), checkpoints (actors.checkpoints) and the run folder's file opens
(actors.files).
`ray.remote` is applied to them in one place, by the driver. Spec: docs/system.md."""
