"""Adaptive sweeps: tasks in rounds, settled arms stop receiving tasks, every arm classified on / off / within
the margin of the frontier (issue 41).

Modules: `core` (the round loop, no I/O), `events` (the typed round event it emits), `settings` (the plan's
`[adaptive]` table; numpy-free, read by every plan parse), `sweep` (the live sweep on the real executors),
`replay` (the replay executor on a stored run), `report`, `budget` (fixed-budget mode), `state` (the progress
blob for `ept status`), `cli` (the commands); the statistics: `sequential` (pair tests, the strict rule),
`epsilon` (the ε-relaxed claims and the auto margin), `boundary` (the boundary over the looks), `run_table`
(a run as matrices) and `secondary` (the bootstrap tables marked secondary). This file imports nothing: a plan
parse loads `settings` alone.
"""
