"""Spec loading: presets, TOML, flag overrides and validation, with the presets' published sizes."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tracekit.planner.layers import activated_params, total_params
from tracekit.planner.presets import MODELS, mla_attention_params
from tracekit.planner.spec import ModelSpec, PlannerError, load_spec

from .specs import EXAMPLES, small_spec


@pytest.mark.parametrize(
    ("preset", "total", "activated"),
    [
        ("deepseek-v3-671b", 671e9, 37e9),  # arXiv 2412.19437, abstract
        ("llama3-70b", 70.6e9, 70.6e9),  # arXiv 2407.21783, table 3 rounds to 70B; 70.6B by count
    ],
)
def test_presets_match_the_published_parameter_counts(preset: str, total: float, activated: float) -> None:
    model = ModelSpec(**MODELS[preset])

    counted, _ = total_params(model)

    assert counted == pytest.approx(total, rel=0.01)
    assert activated_params(model) == pytest.approx(activated, rel=0.02)


def test_mla_attention_params_of_deepseek_v3() -> None:
    # q: 7168x1536 + 1536x128x192; kv: 7168x576 + 512x128x256; o: 128x128x7168
    assert mla_attention_params(7168, 128, 1536, 512, 128, 64, 128) == 187_105_280


def test_deepseek_example_is_the_papers_setting(deepseek) -> None:
    assert (deepseek.cluster.gpus, deepseek.training.pp, deepseek.training.ep) == (2048, 16, 64)
    assert deepseek.cluster.throughput_tflops(deepseek.training.precision) == pytest.approx(0.4 * 1979)


def test_flags_override_the_file_which_overrides_presets(tmp_path: Path) -> None:
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(
        '[cluster]\npreset = "h800-64"\ninter_node_gbps = 25\n[model]\npreset = "llama3-70b"\nlayers = 40\n'
        "[training]\nsequence_length = 4096\nglobal_batch = 64\n"
    )

    spec = load_spec(spec_file, overrides={"model": {"layers": 20, "hidden": None}})

    assert spec.cluster.inter_node_gbps == 25 and spec.cluster.gpus == 64
    assert spec.model.layers == 20 and spec.model.hidden == 8192


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        (
            # no model preset (a preset brings its published batch): the batch must be given
            (
                "[cluster]\npreset = 'h100-64'\n[model]\nlayers = 4\nhidden = 64\nheads = 4\nffn = 256\n"
                "vocab = 100\n[training]\nsequence_length = 4096\n"
            ),
            "missing global_batch",
        ),
        ("[model]\nlayerz = 3\n", "unknown key(s) layerz"),
        ("[optimizer]\nlr = 1\n", "unknown table(s) optimizer"),
        (
            "[training]\nsequence_length = 4096\nglobal_batch = 8\nrecompute = 'some'\n",
            "recompute must be one of",
        ),
        (
            "[training]\nsequence_length = 4096\nglobal_batch = 8\nschedules = ['gpipe']\n",
            "unknown ['gpipe']",
        ),
        ("[training]\nsequence_length = 4096\nglobal_batch = 8\nep = 8\n", "dense: expert parallelism"),
        ("[training]\nsequence_length = 0\nglobal_batch = 8\n", "sequence_length must be an integer >= 1"),
        ("[cluster]\npreset = 'a100-8'\n", "unknown cluster preset 'a100-8'"),
        ("not toml = = 1", "not valid TOML"),
    ],
)
def test_bad_specs_raise_one_clear_error(tmp_path: Path, toml: str, message: str) -> None:
    spec_file = tmp_path / "spec.toml"
    spec_file.write_text(toml)
    presets = {} if "preset" in toml else {"model": "llama3-70b", "cluster": "h100-64"}

    with pytest.raises(PlannerError, match=re.escape(message)):
        load_spec(spec_file, **presets)


def test_a_model_preset_brings_its_published_training_setting() -> None:
    spec = load_spec(None, "deepseek-v3-671b", "h800-2048")

    published = load_spec(EXAMPLES / "deepseek-v3.toml").training
    assert spec.training == dataclasses.replace(published, pp=None)
    assert (spec.training.ep, spec.training.precision, spec.training.pp) == (64, "fp8", None)


def test_moe_spec_needs_ep_dividing_the_experts() -> None:
    with pytest.raises(PlannerError, match=r"ep \(48\) must divide the experts \(256\)"):
        load_spec(EXAMPLES / "deepseek-v3.toml", overrides={"training": {"ep": 48}})


def test_small_spec_defaults() -> None:
    spec = small_spec()

    assert spec.training.schedules == (
        "1f1b",
        "interleaved-1f1b",
        "zb-h1",
        "zb-h2",
        "zbv",
        "dualpipe",
        "dualpipev",
    )
    assert spec.cluster.throughput_tflops("bf16") == pytest.approx(0.4 * 989)


_CUSTOM_CLUSTER = {
    "gpus": 16,
    "gpus_per_node": 8,
    "intra_node_gbps": 100,
    "inter_node_gbps": 25,
    "gpu_memory_gib": 80,
}
_TRAINING = {"sequence_length": 4096, "global_batch": 64}


def test_custom_cluster_needs_a_throughput() -> None:
    overrides = {"cluster": _CUSTOM_CLUSTER, "training": _TRAINING}

    with pytest.raises(PlannerError, match="give achievable_tflops, or peak_bf16_tflops"):
        load_spec(None, model="llama3-70b", overrides=overrides)


def test_custom_cluster_with_achievable_throughput() -> None:
    overrides = {"cluster": _CUSTOM_CLUSTER | {"achievable_tflops": 300.0}, "training": _TRAINING}

    spec = load_spec(None, model="llama3-70b", overrides=overrides)

    assert spec.cluster.name == "custom" and spec.cluster.throughput_tflops("fp8") == 300.0
