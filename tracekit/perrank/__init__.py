"""The per-rank derived layer: each rank's reductions as tasks beside its parse, cached beside its events.

``reduce`` puts a run's ranks together, ``tasks`` holds what runs per rank, ``cache`` the derived
cache, ``engine`` where the tasks run (worker processes here, or a Dask cluster), ``spawn`` how its
worker processes start. docs/scale.md describes the split between per-rank and cross-rank work.
"""
