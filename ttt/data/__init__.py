"""OGBench datasets: offline generation (and the SAC ant expert it needs), file checks, the device-resident Dataset
pytree and the goal-conditioned sampler. The names a user needs, imported on first use (`ttt.data.generate` is the
generation module: `ttt.data.generate.generate`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ttt._lazy import exports

_EXPORTS = {
    "Dataset": "ttt.data.dataset",
    "Batch": "ttt.data.batch",
    "SamplerConfig": "ttt.data.sampler",
    "GoalMix": "ttt.data.sampler",
    "sample_batch": "ttt.data.sampler",
    "DatasetSpec": "ttt.data.specs",
    "SPECS": "ttt.data.specs",
    "get_spec": "ttt.data.specs",
    "load": "ttt.data.files",
    "check": "ttt.data.files",
    "list_datasets": "ttt.data.files",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from ttt.data.batch import Batch as Batch
    from ttt.data.dataset import Dataset as Dataset
    from ttt.data.files import check as check
    from ttt.data.files import list_datasets as list_datasets
    from ttt.data.files import load as load
    from ttt.data.sampler import GoalMix as GoalMix
    from ttt.data.sampler import SamplerConfig as SamplerConfig
    from ttt.data.sampler import sample_batch as sample_batch
    from ttt.data.specs import SPECS as SPECS
    from ttt.data.specs import DatasetSpec as DatasetSpec
    from ttt.data.specs import get_spec as get_spec
