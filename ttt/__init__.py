"""ttt: goal-conditioned test-time training (GC-TTT) for offline goal-conditioned RL, in JAX/Equinox.

The public API, each name once (imported on first use, so that `import ttt` and the command line start fast):

    import ttt

    setup, agents, data, env = ttt.load_run("runs/gcbc", data_dir="data", variant="ttt")
    result = ttt.evaluate(setup, agents, data, episodes=10, tasks=(1, 2), env=env)

`ttt.evaluate` is the batch evaluation function (its module is `ttt.evaluation`). Modules whose main function has the
module's name stay modules: `ttt.pretrain.pretrain`, `ttt.select.select`, `ttt.finetune`, `ttt.episode`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ttt._lazy import exports
from ttt._version import __version__ as __version__

_EXPORTS = {
    # from a checkpoint to results
    "load_run": "ttt.setups",
    "make_setup": "ttt.setups",
    "VARIANTS": "ttt.setups",
    "evaluate": "ttt.evaluation",
    "EvalSetup": "ttt.evaluation",
    "EvalResult": "ttt.evaluation",
    "run_episode": "ttt.evaluation",
    # the GC-TTT pieces
    "TTTConfig": "ttt.episode",
    "EpisodeOut": "ttt.episode",
    "make_episodes": "ttt.episode",
    "make_episode": "ttt.episode",
    "make_round_fns": "ttt.episode",
    "make_act": "ttt.episode",
    "SelectConfig": "ttt.select",
    "GoalTables": "ttt.select",
    "Selection": "ttt.select",
    "Transforms": "ttt.select",
    "training_rows": "ttt.select",
    "FinetuneConfig": "ttt.finetune",
    "make_finetune": "ttt.finetune",
    # data, agents, environments
    "Dataset": "ttt.data.dataset",
    "SamplerConfig": "ttt.data.sampler",
    "DatasetSpec": "ttt.data.specs",
    "get_spec": "ttt.data.specs",
    "load_dataset": "ttt.data.files:load",
    "get_backbone": "ttt.agents",
    "load_checkpoint": "ttt.checkpoint",
    "Checkpoint": "ttt.checkpoint",
    "open_checkpoint": "ttt.checkpoint",
    "load_policy": "ttt.checkpoint",
    "import_checkpoint": "ttt.interop",
    "export_checkpoint": "ttt.interop",
    "Env": "ttt.envs",
    "make_env": "ttt.envs",
    "TttError": "ttt.errors",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # what type checkers and editors see: the same names, imported eagerly
    from ttt.agents import get_backbone as get_backbone
    from ttt.checkpoint import Checkpoint as Checkpoint
    from ttt.checkpoint import load_checkpoint as load_checkpoint
    from ttt.checkpoint import load_policy as load_policy
    from ttt.checkpoint import open_checkpoint as open_checkpoint
    from ttt.data.dataset import Dataset as Dataset
    from ttt.data.files import load as load_dataset  # noqa: F401  (a re-export under another name)
    from ttt.data.sampler import SamplerConfig as SamplerConfig
    from ttt.data.specs import DatasetSpec as DatasetSpec
    from ttt.data.specs import get_spec as get_spec
    from ttt.envs import Env as Env
    from ttt.envs import make_env as make_env
    from ttt.episode import EpisodeOut as EpisodeOut
    from ttt.episode import TTTConfig as TTTConfig
    from ttt.episode import make_act as make_act
    from ttt.episode import make_episode as make_episode
    from ttt.episode import make_episodes as make_episodes
    from ttt.episode import make_round_fns as make_round_fns
    from ttt.errors import TttError as TttError
    from ttt.evaluation import EvalResult as EvalResult
    from ttt.evaluation import EvalSetup as EvalSetup
    from ttt.evaluation import evaluate as evaluate
    from ttt.evaluation import run_episode as run_episode
    from ttt.finetune import FinetuneConfig as FinetuneConfig
    from ttt.finetune import make_finetune as make_finetune
    from ttt.interop import export_checkpoint as export_checkpoint
    from ttt.interop import import_checkpoint as import_checkpoint
    from ttt.select import GoalTables as GoalTables
    from ttt.select import SelectConfig as SelectConfig
    from ttt.select import Selection as Selection
    from ttt.select import Transforms as Transforms
    from ttt.select import training_rows as training_rows
    from ttt.setups import VARIANTS as VARIANTS
    from ttt.setups import load_run as load_run
    from ttt.setups import make_setup as make_setup
