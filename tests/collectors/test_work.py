"""What the collector records of each stage's work: parameters, embedding parameters, layers."""

from __future__ import annotations

from torch import nn

from collectors.manifest import StageWork
from collectors.work import stage_work


class _Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 8)
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8)) for _ in range(3))
        self.head = nn.Linear(8, 100, bias=False)


def test_a_stage_counts_its_parameters_embeddings_and_repeated_blocks() -> None:
    work = stage_work(0, _Blocks())

    linear, norm = 8 * 8 + 8, 2 * 8
    assert work == StageWork(stage=0, params=800 + 3 * (linear + norm) + 800, embedding_params=800, layers=3)


def test_without_repeated_blocks_layers_are_the_parameterized_leaves() -> None:
    work = stage_work(5, nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 2)))

    assert (work.stage, work.params, work.embedding_params, work.layers) == (5, 30, 0, 2)


def test_something_that_is_not_a_module_is_reported_not_raised(capfd) -> None:
    assert stage_work(1, object()) is None
    assert "cannot count the work of stage 1" in capfd.readouterr().err
