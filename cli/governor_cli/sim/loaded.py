"""What the backtest's fast readers load, and how they hand a file back: shared by the columnar replay
(:mod:`governor_cli.sim.columnar`) and the Parquet reader (:mod:`governor_cli.sim.parquet`), so neither imports the
other to raise or read these (``Unsure`` itself is the metrics file's, shared by every fast reader).
"""

from __future__ import annotations

from governor.idle.domain import CPU_UTILIZATION, GPU_ENGINE_ACTIVE, GPU_MEMORY_USED, GPU_POWER, GPU_UTILIZATION
from governor_cli.sim.metrics_file import Unsure

__all__ = ["LOADED", "Unsure"]

# The metrics a metrics file may hold, by code; each reader keeps the ones its file holds, in this order (``metrics``).
LOADED = (GPU_UTILIZATION, GPU_MEMORY_USED, CPU_UTILIZATION, GPU_POWER, GPU_ENGINE_ACTIVE)
