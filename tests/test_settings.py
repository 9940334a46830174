"""One declaration per setting (`ttt.settings.SETTINGS`): the pipelines' run keys and checks, `ttt eval`'s options,
`make_setup`'s keywords, defaults and range checks, and the evaluation keys are derived from it (docs/reference.md's
table is checked by tests/test_docs.py)."""

from __future__ import annotations

import pytest

from ttt.errors import TttError
from ttt.settings import SETTINGS, option_name, setup_names

# The settings every committed evaluation record's content key was computed over: a change here changes keys.
RECORD_EVAL_KEYS = {"episodes", "tasks", "eval_seed", "K", "N", "lr", "q", "eps", "h_min", "H", "mix", "noise_alpha",
                    "relevance", "c_rel", "selection", "batch", "driver", "backend", "rule", "critic", "n_episodes",
                    "slack", "once", "reset_after_horizon", "reuse_adam", "ft_train", "ft_alpha", "ttgs"}  # fmt: skip


def test_the_evaluation_keys_are_the_records():
    from ttt.pipeline.config import EVAL_KEYS, LATE_EVAL_KEYS, RUN_KEYS
    from ttt.pipeline.keys import BASE_EVAL_KEYS

    assert list(RUN_KEYS) == list(SETTINGS) and RUN_KEYS["q"] is SETTINGS["q"]
    assert "antmaze-medium-navigate-v0" in RUN_KEYS["dataset"].choice_list() and "gcbc" in RUN_KEYS["agent"].choices()
    # A setting added since enters the key only when set (late): the committed records keep their keys.
    assert RECORD_EVAL_KEYS <= set(EVAL_KEYS) and set(EVAL_KEYS) - RECORD_EVAL_KEYS <= set(LATE_EVAL_KEYS)
    assert {"ft_train", "ft_alpha", "ttgs"} <= set(LATE_EVAL_KEYS) and not set(LATE_EVAL_KEYS) & {"K", "q", "rule"}
    assert BASE_EVAL_KEYS == ("episodes", "tasks", "eval_seed", "driver", "backend")


def test_ttt_eval_options_are_the_declaration():
    from ttt.cli.evaluate import eval_cmd

    params = {p.name: p for p in eval_cmd.params}
    declared = [k for k in SETTINGS if option_name(k)]
    assert set(params) == {"checkpoint", "variants", "json_out", *declared}
    for k in declared:
        s, p = SETTINGS[k], params[k]
        assert p.opts == [option_name(k)], k
        if s.stage == "eval" and s.kind not in ("list[int]", "table"):
            assert p.default == s.default, k
        if isinstance(s.choices, tuple):
            assert tuple(p.type.choices) == s.choices, k


def _gcbc():
    from ttt.data.specs import get_spec
    from ttt.presets import agent_configs

    spec = get_spec("pointmaze-medium-navigate-v0")
    backbone, cfg, sampler = agent_configs("gcbc", spec, "cpu", {})
    return backbone, cfg, sampler, spec


def test_make_setup_takes_the_declared_settings_with_their_defaults():
    from ttt.setups import make_setup

    backbone, cfg, sampler, spec = _gcbc()
    ttt = make_setup("ttt-mc", backbone, cfg, sampler, spec, 1000, bucket=1).ttt
    assert (ttt.K, ttt.finetune.steps, ttt.finetune.lr) == (SETTINGS["K"].default, SETTINGS["N"].default,
                                                            SETTINGS["lr"].default)  # fmt: skip
    assert (ttt.select.q, ttt.select.h_min, ttt.select.slack) == tuple(SETTINGS[k].default for k in
                                                                       ("q", "h_min", "slack"))  # fmt: skip
    assert {"K", "N", "lr", "q", "ft_alpha", "c_rel"} <= set(setup_names())
    with pytest.raises(TttError, match=r"^unknown setting\(s\) Q; valid: K, N, lr, q"):
        make_setup("ttt", backbone, cfg, sampler, spec, 1000, Q=0.1)


@pytest.mark.parametrize("key, value", [("q", 1.5), ("N", 0), ("mix", 2.0), ("ft_alpha", -1.0), ("H", 1)])
def test_a_value_out_of_range_is_refused_alike_in_python_and_in_a_pipeline(key, value):
    """The range and its words come from the declaration: `make_setup` and a pipeline's check say the same."""
    from ttt.pipeline.config import check_value
    from ttt.setups import make_setup

    backbone, cfg, sampler, spec = _gcbc()
    with pytest.raises(TttError) as python:
        make_setup("ttt-mc", backbone, cfg, sampler, spec, 1000, **{key: value})
    with pytest.raises(TttError) as pipeline:
        check_value(key, value, "p.toml run 1")
    assert str(pipeline.value) == f"p.toml run 1: {python.value}"
    assert str(python.value).startswith(f"{key} ") and SETTINGS[key].valid in str(python.value)
