"""`ttt import ogbench` and `ttt export ogbench`: agents in OGBench's checkpoint format, in and out
(`ttt.interop`)."""

from __future__ import annotations

import click

from ttt.cli.common import dataset_name, parse_json_sets
from ttt.errors import TttError
from ttt.safe_files import read_json, show


@click.group("import")
def import_group() -> None:
    """Bring an agent trained elsewhere into a ttt checkpoint."""


@import_group.command("ogbench")
@click.argument("pkls", nargs=-1, required=True, type=str)
@click.option("--agent", required=True, help="gcbc, gciql, qrl or saw (GC-IQL with AWR: --set actor_loss=awr).")
@click.option("--dataset", required=True, callback=dataset_name, help="The dataset the agent was trained on.")
@click.option("--out", required=True, type=str, help="The new checkpoint directory (must not exist, or be empty).")
@click.option("--dir", "directory", type=str, default=None, help="Dataset directory (default: OGBench's).")
@click.option("--flags", "flags_file", type=str, default=None,
              help="The reference run's flags.json: its 'agent' settings are used (--set overrides them).")
@click.option("--set", "sets", multiple=True, help="A reference config setting: key=value (alpha=0.003, ...).")
@click.option("--reference", default="ogbench", show_default=True, type=click.Choice(["ogbench", "meta-gc-rl"]),
              help="Which code wrote the pickles (recorded in the checkpoint's meta).")  # fmt: skip
def import_ogbench(pkls, agent, dataset, out, directory, flags_file, sets, reference):
    """Import OGBench-format agent pickles (params_N.pkl of impls/ or the GC-TTT authors' code; one per seed).

    Network sizes are read from the parameter shapes; alpha, discount, expectile, the goal sampling and the rest
    come from --flags / --set over the reference's get_config() defaults. The pickle is read with a restricted
    unpickler: nothing in it runs."""
    from ttt.interop import import_checkpoint

    settings = _flags(flags_file, dataset) if flags_file else {}
    settings.update(parse_json_sets(sets))
    ck = import_checkpoint(list(pkls), agent, dataset, out, settings=settings, data_dir=directory,
                           reference=reference)  # fmt: skip
    cfg = ck.cfg
    dims = {k: v for k, v in vars(cfg).items() if k.endswith("hidden_dims") or k in ("layer_norm", "latent_dim")}
    click.echo(f"imported {len(pkls)} seed(s) of {ck.agent_name} ({', '.join(f'{k} {v}' for k, v in dims.items())}) "
               f"on {dataset} at update {ck.meta['step']} -> {out}")  # fmt: skip


def _flags(path: str, dataset: str) -> dict:
    doc = read_json(path, "--flags")  # a regular file, capped, nesting bounded; every failure one line
    if not isinstance(doc, dict):
        raise TttError(f"--flags {path}: expected a JSON object (the reference's flags.json)")
    env_name = doc.get("env_name")
    if isinstance(env_name, str) and env_name != dataset:
        raise TttError(f"--flags {path}: the run trained on env_name {show(repr(env_name))}, not --dataset "
                       f"{dataset!r}; name the dataset it trained on")  # fmt: skip
    agent = doc.get("agent", doc)
    if not isinstance(agent, dict):
        raise TttError(f"--flags {path}: its 'agent' entry is not an object")
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in agent.items()}


@click.group("export")
def export_group() -> None:
    """Write a ttt checkpoint in another code's format."""


@export_group.command("ogbench")
@click.argument("checkpoint", type=str)
@click.option("--out", required=True, type=str, help="The pickle to write (e.g. params_100000.pkl).")
@click.option("--seed", type=int, default=0, show_default=True, help="Which of the checkpoint's seeds.")
def export_ogbench(checkpoint, out, seed):
    """Write one seed of CHECKPOINT as the pickle OGBench's restore_agent reads."""
    from ttt.interop import export_checkpoint

    path = export_checkpoint(checkpoint, out, seed=seed)
    click.echo(f"exported seed {seed} of {checkpoint} -> {path}")
