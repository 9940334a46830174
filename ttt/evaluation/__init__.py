"""Batch evaluation of pre-trained agents, base policy or GC-TTT, on OGBench's evaluation tasks (docs/architecture.md,
"The one compiled episode" and "The host driver"). This face re-exports every public name once; the modules by role:
`results` (what an evaluation returns), `setup` (what it is before it runs), `compiled` and `host` (the two drivers),
`sharding` (devices and processes) and `run` (`evaluate`)."""

from ttt.evaluation.compiled import Elements as Elements
from ttt.evaluation.compiled import Shared as Shared
from ttt.evaluation.compiled import make_compiled as make_compiled
from ttt.evaluation.compiled import run_episode as run_episode
from ttt.evaluation.host import make_host_fns as make_host_fns
from ttt.evaluation.host import run_host as run_host
from ttt.evaluation.results import EvalResult as EvalResult
from ttt.evaluation.results import GridResult as GridResult
from ttt.evaluation.results import active_rounds as active_rounds
from ttt.evaluation.run import evaluate as evaluate
from ttt.evaluation.setup import OGBENCH_TASKS as OGBENCH_TASKS
from ttt.evaluation.setup import EpisodeBatch as EpisodeBatch
from ttt.evaluation.setup import EvalSetup as EvalSetup
from ttt.evaluation.setup import call_bytes as call_bytes
from ttt.evaluation.setup import check_eval_memory as check_eval_memory
from ttt.evaluation.setup import episode_batch as episode_batch
from ttt.evaluation.setup import eval_bytes as eval_bytes
from ttt.evaluation.setup import grid_points as grid_points
from ttt.evaluation.setup import program_setup as program_setup
from ttt.evaluation.setup import setup_hparams as setup_hparams
from ttt.evaluation.setup import ttgs_cost_note as ttgs_cost_note
from ttt.evaluation.sharding import batch_sharding as batch_sharding
from ttt.evaluation.sharding import call_size as call_size
