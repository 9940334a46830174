"""`ttt run`: declarative pipelines of runs (dataset x agent x variant x settings) taken through the data,
pre-training and evaluation stages, cached by content and resumable, then results and a report.

config (the TOML schema, a run as a flat dict) -> plan (`plan_run`: the run resolved once into a checked, immutable
`RunPlan`) -> stages (data, pretrain, eval: each consumes the plan, returns its artifact; keys: where artifacts live)
-> run (`run_pipeline`) -> report (results.json / csv, report.md, plots)."""

from ttt.pipeline.config import Pipeline as Pipeline
from ttt.pipeline.config import find_pipeline as find_pipeline
from ttt.pipeline.config import load_pipeline as load_pipeline
from ttt.pipeline.config import parse_sets as parse_sets
from ttt.pipeline.config import select_runs as select_runs
from ttt.pipeline.keys import cache_root as cache_root
from ttt.pipeline.plan import RunPlan as RunPlan
from ttt.pipeline.plan import plan_run as plan_run
from ttt.pipeline.plan import validate_run as validate_run
from ttt.pipeline.report import combine as combine
from ttt.pipeline.report import write_report as write_report
from ttt.pipeline.run import STAGES as STAGES
from ttt.pipeline.run import RunOutcome as RunOutcome
from ttt.pipeline.run import run_pipeline as run_pipeline
from ttt.pipeline.settings import relevance_everywhere as relevance_everywhere
from ttt.pipeline.settings import select_random_rank as select_random_rank
from ttt.pipeline.stages import ensure_checkpoint as ensure_checkpoint
from ttt.pipeline.stages import ensure_data as ensure_data
from ttt.pipeline.stages import evaluate_run as evaluate_run
