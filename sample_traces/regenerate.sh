#!/usr/bin/env bash
# Regenerates every sample run in this directory: real CPU captures of collectors.example_job made
# with `tracekit record` (4 ranks, 8 micro-batches, 3 steps of which steps 1 and 2 are captured), of
# a model small enough that four ranks' compute fits on two cores (benchmarks/example_model.py).
# Run from anywhere, on a quiet machine; needs tracekit installed (pip install -e '.[examples]').
# Takes about a minute.
set -euo pipefail
cd "$(dirname "$0")"

capture() {
    local name=$1
    shift
    rm -rf "$name"
    tracekit record --out "$name" --steps 1:3 -- \
        python -m collectors.example_job --ranks 4 --microbatches 8 --steps 3 --hidden 128 --microbatch-rows 16 "$@"
}

capture gpipe --schedule gpipe
capture 1f1b --schedule 1f1b
capture interleaved-1f1b --schedule interleaved-1f1b
capture zbv --schedule zbv
capture dualpipev --schedule dualpipev
capture dualpipev-straggler --schedule dualpipev --slow-rank 2 --slow-ms 5
capture deepseek-dualpipe --schedule deepseek-dualpipe

du -sh .
