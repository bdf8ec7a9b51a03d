"""A pipeline plan in words: why the recommendation wins (or nothing fits), its assumptions, its JSON.

Every figure comes from ``tracekit.planner.plan.Plan``; nothing here simulates or ranks. The
Markdown report (``plan_markdown``) and ``tracekit plan``'s JSON and tables read these.

Not for: choosing the plan (``tracekit.planner.plan``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import polars as pl

from tracekit.planner.candidates import SIMULATION_BUDGET, Rejection
from tracekit.planner.costs import p2p_ms
from tracekit.planner.memory import SecondCopy
from tracekit.planner.plan import Plan
from tracekit.planner.spec import PlanSpec
from tracekit.present.result import Result, Table


def reasons(plan: Plan) -> tuple[str, ...]:
    """Why the recommendation wins, with its figures against the alternatives; or why nothing fits."""
    if plan.recommendation is None:
        return _why_nothing(plan.spec, plan.alternatives, list(plan.rejections))
    return _why(plan.spec, plan.recommendation, plan.alternatives, plan.second_copy, plan.compute_to_a2a)


def assumptions(plan: Plan) -> tuple[str, ...]:
    """The assumptions the figures rest on: costs and memory, extrapolation, calibration."""
    sampled: tuple[str, ...] = ()
    if plan.extrapolated:
        sampled = (
            (
                f"Candidates with M > 4 pp and over {SIMULATION_BUDGET} stage x micro-batch cells are simulated at "
                "M = 2 pp and 4 pp and extrapolated linearly in M, peak activations taken from 4 pp (simulated_at)."
            ),
        )
    return _cost_assumptions(plan.spec, plan.pp) + sampled + plan.calibration_notes


def payload(plan: Plan) -> dict[str, Any]:
    """The JSON shape: recommendation, alternatives, rejected, memory, second copy, assumptions."""
    why = list(reasons(plan))
    return {
        "model": plan.spec.model.name,
        "cluster": plan.spec.cluster.name,
        "recommendation": None if plan.recommendation is None else plan.recommendation | {"reasons": why},
        "reasons": why,
        "alternatives": plan.alternatives.to_dicts(),
        "rejected": plan.rejected.to_dicts(),
        "memory": plan.memory.to_dicts(),
        "second_copy": dataclasses.asdict(plan.second_copy),
        "compute_to_a2a": plan.compute_to_a2a,
        "assumptions": list(assumptions(plan)),
    }


FITTING_COLUMNS = (
    "schedule",
    "pp",
    "microbatches",
    "step_ms",
    "bubble_fraction",
    "exposed_a2a_ms",
    "headroom_gib",
    "extra_gpu_hours_per_mtok",
)
"""The columns of the alternatives that fit a terminal shows by default; ``--wide`` shows all."""

UNFIT_COLUMNS = ("schedule", "pp", "microbatches", "step_ms", "memory_gib", "over_gib")
"""The columns of the candidates that do not fit memory a terminal shows by default."""

HEADERS = {
    "pp": "PP",
    "microbatches": "M",
    "step_ms": "step ms",
    "bubble_fraction": "bubble",
    "exposed_a2a_ms": "exposed a2a ms",
    "lost_fraction": "lost",
    "peak_activations": "peak act.",
    "memory_gib": "memory GiB",
    "headroom_gib": "free GiB",
    "over_gib": "over by GiB",
    "gpu_hours_per_mtok": "GPU-h /Mtok",
    "extra_gpu_hours_per_mtok": "extra GPU-h /Mtok",
    "simulated_at": "simulated at M",
    "param_copies": "copies",
}


def split_alternatives(alternatives: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The simulated candidates that fit memory, and those that do not (with ``over_gib``, the GiB
    above the GPU's memory); ``simulated_at`` reads ``64 & 128`` where two counts were simulated."""
    shown = alternatives.with_columns(pl.col("simulated_at").str.replace_all(",", " & "))
    fitting = shown.filter(pl.col("fits")).drop("fits", "note")
    unfit = (
        shown.filter(~pl.col("fits"))
        .drop("fits", "extra_gpu_hours_per_mtok")
        .with_columns((-pl.col("headroom_gib")).alias("over_gib"))
    )
    return fitting, unfit


def headline(plan: Plan) -> tuple[str, ...]:
    """The answer before the tables: the recommendation and its step, or why nothing fits."""
    why = reasons(plan)
    return why[:2] if plan.recommendation is None else why[:1]


def plan_result(plan: Plan) -> Result:
    """``tracekit plan``'s JSON and tables (the Markdown report is ``plan_markdown.render``)."""
    fitting, unfit = split_alternatives(plan.alternatives)
    gib = plan.spec.cluster.gpu_memory_gib
    tables = (
        Table(
            "alternatives that fit in memory, fastest first (extra: against the recommendation)",
            fitting,
            notes=headline_rest(plan),
            name="alternatives",
            columns=FITTING_COLUMNS,
            headers=HEADERS,
            shown=not fitting.is_empty(),
        ),
        Table(
            f"do not fit in {gib:g} GiB per GPU (faster on paper, but they cannot run)",
            unfit,
            name="unfit",
            columns=UNFIT_COLUMNS,
            headers=HEADERS,
            shown=not unfit.is_empty(),
        ),
        Table(
            "ruled out before simulation",
            plan.rejected,
            name="rejected",
            headers=HEADERS,
            shown=not plan.rejected.is_empty(),
        ),
        Table(
            "memory of the recommendation per rank, GiB",
            plan.memory,
            headers={column: column.removesuffix("_gib").replace("headroom", "free") for column in plan.memory.columns},
            name="memory",
            shown=not plan.memory.is_empty(),
        ),
    )
    definitions = (
        "bubble: mean over ranks of idle / step; lost: 1 - mean compute / step (bubbles and exposed all-to-all); "
        "memory and free: the fullest rank; extra GPU-h /Mtok: GPU-hours per million tokens against the "
        "recommendation; simulated at M: the micro-batch counts simulated, two when the figures are "
        "extrapolated from them",
        *(f"assumption: {line}" for line in assumptions(plan)),
    )
    return Result(payload=payload(plan), tables=tables, headline=headline(plan), definitions=definitions)


def headline_rest(plan: Plan) -> tuple[str, ...]:
    """The reasons the headline leaves out, printed under the alternatives."""
    why = reasons(plan)
    return why[2:] if plan.recommendation is None else why[1:]


def _best(alternatives: pl.DataFrame, condition: pl.Expr) -> dict[str, Any] | None:
    rows = alternatives.filter(condition).sort("step_ms")
    return rows.row(0, named=True) if not rows.is_empty() else None


def _why(
    spec: PlanSpec, rec: dict[str, Any], alternatives: pl.DataFrame, copy: SecondCopy, ratio: float | None
) -> tuple[str, ...]:
    """The reasons the recommendation wins, with its figures against the alternatives."""
    name, pp = rec["schedule"], rec["pp"]
    fitting = alternatives.filter(pl.col("fits"))
    quickest = rec["step_ms"] <= float(fitting["step_ms"].min())  # type: ignore[arg-type]
    reasons = [
        (
            f"{name} at PP{pp} with {rec['microbatches']} micro-batches per step: {rec['step_ms']:.1f} ms per step, "
            f"the {'fastest' if quickest else 'leanest of the tied fastest'} of {fitting.height} candidates that fit "
            f"in memory ({alternatives.height} simulated)."
        )
    ]
    baseline = _best(alternatives, (pl.col("schedule") == "1f1b") & (pl.col("pp") == pp))
    compared = baseline is not None and name != "1f1b"
    bubble = f"Expected bubble fraction {rec['bubble_fraction']:.1%} at {spec.cluster.gpus} GPUs"
    lost = f"time lost to bubbles and exposed all-to-all {rec['lost_fraction']:.1%}"
    if compared:
        bubble += f" (1f1b at PP{pp}: {baseline['bubble_fraction']:.1%})"
        lost += f" (1f1b: {baseline['lost_fraction']:.1%})"
    reasons.append(f"{bubble}; {lost}.")
    if ratio is not None:
        worst = _best(alternatives, pl.col("exposed_a2a_ms") == pl.col("exposed_a2a_ms").max())
        assert worst is not None
        reasons.append(
            f"Compute : all-to-all is {ratio:.2f} : 1 in the forward; exposed all-to-all "
            f"{rec['exposed_a2a_ms']:.1f} ms per step ({rec['exposed_a2a_ms'] / rec['step_ms']:.1%} of it), "
            f"against {worst['exposed_a2a_ms']:.1f} ms for {worst['schedule']} at PP{worst['pp']}."
        )
    reasons.append(
        f"Memory: {rec['memory_gib']:.1f} of {spec.cluster.gpu_memory_gib:g} GiB on the fullest rank, "
        f"{rec['headroom_gib']:.1f} GiB headroom."
    )
    economics = f"{rec['gpu_hours_per_mtok']:.3f} GPU-hours per million tokens"
    others = alternatives.filter(pl.col("fits") & ~((pl.col("schedule") == name) & (pl.col("pp") == pp)))
    runner_up = _best(others, pl.lit(True))
    if runner_up is not None:
        economics += (
            f"; against it, the next best ({runner_up['schedule']} at PP{runner_up['pp']}) costs "
            f"{runner_up['extra_gpu_hours_per_mtok']:+.3f} GPU-hours per million tokens"
        )
    baseline_is_runner_up = (
        runner_up is not None
        and baseline is not None
        and baseline["pp"] == runner_up["pp"]
        and baseline["schedule"] == runner_up["schedule"]
    )
    if compared and baseline is not None and baseline["fits"] and not baseline_is_runner_up:
        economics += f" and 1f1b at PP{pp} {baseline['extra_gpu_hours_per_mtok']:+.3f}"
    reasons.append(f"{economics}.")
    reasons.append(_copy_reason(spec, rec, alternatives, copy))
    return tuple(reasons)


def _copy_reason(spec: PlanSpec, rec: dict[str, Any], alternatives: pl.DataFrame, copy: SecondCopy) -> str:
    """What DualPipe's 2x parameters cost here, and why that is (or is not) affordable."""
    cost = (
        f"DualPipe's second parameter copy costs {copy.state_gib:.1f} GiB per GPU at PP{copy.pp} "
        f"({copy.share_of_memory:.0%} of {spec.cluster.gpu_memory_gib:g} GiB) in weights, gradients and optimizer shard"
    )
    if spec.model.is_moe:
        spread = (
            f"{copy.routed_fraction:.0%} of the {copy.total_params / 1e9:.0f}B parameters are routed experts spread over "
            f"ep={copy.ep} GPUs, so one copy is {copy.params_per_gpu / 1e9:.2f}B parameters per GPU instead of "
            f"{copy.params_per_gpu_without_ep / 1e9:.1f}B"
        )
    else:
        spread = (
            f"the model is dense: every one of its {copy.total_params / 1e9:.0f}B parameters is replicated along the "
            f"pipeline, {copy.params_per_gpu / 1e9:.2f}B per GPU per copy, with no expert parallelism to thin it"
        )
    if rec["param_copies"] > 1:
        return f"{cost}; affordable here: {spread}, and the plan still leaves {rec['headroom_gib']:.1f} GiB free."
    dualpipe = _best(alternatives, (pl.col("schedule") == "dualpipe") & (pl.col("pp") == rec["pp"]))
    if dualpipe is None:
        verdict = "DualPipe could not run at this depth (see the ruled-out candidates)"
    elif not dualpipe["fits"]:
        verdict = f"DualPipe does not fit: it {dualpipe['note']}"
    else:
        verdict = f"DualPipe fits but its {dualpipe['step_ms']:.1f} ms step does not pay for the copy"
    return f"{cost}; {spread}. {verdict}."


def _why_nothing(spec: PlanSpec, alternatives: pl.DataFrame, rejections: list[Rejection]) -> tuple[str, ...]:
    """Why no candidate can run, with what would change that."""
    reasons = [
        f"No pipeline strategy fits {spec.model.name} on {spec.cluster.name} ({spec.cluster.gpus} GPUs)."
    ]
    if not alternatives.is_empty():
        leanest = alternatives.sort("memory_gib").row(0, named=True)
        reasons.append(
            f"The leanest, {leanest['schedule']} at PP{leanest['pp']}, {leanest['note']}: try recompute = "
            f'"full", a smaller micro-batch, a deeper pipeline or more expert parallelism.'
        )
    if alternatives.is_empty() and not rejections:
        reasons.append(
            f"No pipeline depth from 2 to {spec.model.layers} divides the {spec.cluster.gpus} GPUs."
        )
    reasons += [f"PP{r.pp} {r.schedule}: {r.reason}." for r in rejections[:10]]
    if len(rejections) > 10:
        reasons.append(f"... and {len(rejections) - 10} more ruled out (see the table).")
    return tuple(reasons)


def _cost_assumptions(spec: PlanSpec, pp: int) -> tuple[str, ...]:
    """The cost and memory assumptions behind the figures, in words, with the spec's numbers."""
    cluster, training = spec.cluster, spec.training
    tflops = cluster.throughput_tflops(training.precision)
    source = (
        "given as achievable_tflops"
        if cluster.achievable_tflops is not None
        else f"{cluster.mfu:.0%} of the {training.precision.upper()} dense peak "
        f"{cluster.peak_fp8_tflops if training.precision == 'fp8' else cluster.peak_bf16_tflops:g}"
    )
    return (
        (
            f"Compute runs at {tflops:.0f} TFLOP/s per GPU ({source}); F = matmul + attention core FLOPs, "
            "I = matmul + 2 x core + recomputation, W = matmul."
        ),
        (
            f"All-to-all per MoE layer and pass: max(cross-node bytes / {cluster.inter_node_gbps:g} GB/s, "
            f"NVLink bytes / {cluster.intra_node_gbps:g} GB/s); dispatch {training.dispatch_bytes:g} and combine "
            f"{training.combine_bytes:g} bytes per element; exposed unless the step is an overlapped F&B pair."
        ),
        (
            "An overlapped F&B pair costs max(both halves' compute, both halves' all-to-all); SMs reserved for "
            "communication are not modelled."
        ),
        f"Pipeline hops send one micro-batch's BF16 activations: {p2p_ms(spec, pp):.2f} ms per hop at PP{pp}.",
        (
            "No tensor or context parallelism; data parallelism (ZeRO-1) gradient traffic overlapped and left out "
            "of the step; expert parallelism carved out of data parallelism."
        ),
        (
            f"Memory per parameter: {training.param_bytes:g} B weights + {training.grad_bytes:g} B gradients on every "
            f"rank holding it, {training.optimizer_bytes:g} B optimizer state sharded over data parallelism; "
            f"{training.reserved_gib:g} GiB reserved per GPU."
        ),
        (
            f"Activations: recompute = {training.recompute}, {training.activation_bytes:g} B per saved element, times "
            "the simulator's peak in-flight micro-batches."
        ),
        (
            "Layers are cut into stages balanced by time (embedding on the first, output head on the last); "
            "multi-token prediction modules are not modelled."
        ),
    )
