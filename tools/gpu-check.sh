#!/usr/bin/env bash
# The GPU check of the cuda backend, as one command on a GPU machine, from the
# device bundle (tools/gpu-bundle.sh; nothing is installed or built there).
# Two parts, each one device-tool call (GPU_CHECK_BUDGET_S, default 540 s: the
# tool's 10-minute call with time to spare); every step runs under `timeout`
# with its own budget, and the budgets of a part sum under its limit (checked
# at start: `--dry-run` prints the order, the budgets and the sum). A step
# that no longer fits is SKIPPED with the reason, never cut off mid-way.
# The first part, in the order the first run must learn it (issue 72):
#   load          pipebench starts with the bundle's CUDA, cuBLAS and NCCL
#   memcheck-run  compute-sanitizer memcheck on one tiny whole run (1 rank, 1 step):
#                 every kernel of a training step, which have never run
#   initcheck     compute-sanitizer initcheck on the smallest cross-check
#   racecheck     compute-sanitizer racecheck on the same (shared-memory kernels)
#   memcheck-schedules  memcheck on the split backward and recomputation check
#   gpu-tests     cuda vs cpu cross-checks, gpt and llama blocks (fp32 within
#                 1e-4, bf16/fp16 within 2e-2 of the cpu fp32 losses; every
#                 schedule, split backward and recomputation), bit-repeatability, fp32 gradient
#                 accumulation, memory tracker, OOM (gpu_tests)
#   sticky-error  a broken context is seen by the runner's device check
#   schedules-2ranks-1gpu  interleaved, ZB-H1, ZB-V, looped BFS, interleaved ZB, DualPipeV, recomputation: whole runs vs the baseline
#   llama-2ranks-1gpu      the llama block (tests/data/gpu/tiny_llama.toml): 1F1B, ZB-V, recomputation vs the baseline
#   dp-4ranks-1gpu         data parallelism, gradients host-staged over MPI: 1 x 2 and 2 x 2 vs the baseline
#   tp-4ranks-1gpu         tensor parallelism (collectives host-staged over MPI): gpt t 2, selective, sequence
#                          parallel, p 2 x t 2 with interleaved, ZB-H1 (selective + sequence parallel) and full
#                          recomputation; llama t 2 (vocabulary 300: both ranks hold real columns) and p 2 x t 2
#                          ZB-V with sequence parallelism; all vs the baseline, selective bit for bit
# The second part (--timings), once the first passes:
#   gemm          cuBLAS TFLOP/s at the 350M GPT's shapes, random inputs
#   torch-gemm    PyTorch matmul at the same shapes: the reference
#   baseline-1gpu jobs/gpu/gpt_350m_cuda.toml, 1 rank (bf16 350M GPT), with the GPU's
#                 device preset: the report's time-model step beside the measured one
#   torch-gpt     PyTorch bf16 training step of the same GPT: the peer
#   pipeline-2ranks-1gpu  its 2-stage 1F1B as 2 ranks on GPU 0 over MPI
#   gemm-k-sweep  cuBLAS TFLOP/s of 8192 x 8192 x K GEMMs, K = 32 ... 8192: the
#                 measurement the time model's efficiency table should be
#                 calibrated from, beside the time model (docs/time-model.md, "Calibrating the GEMM table")
#   gemm-accumulate  bf16 GEMMs into fp32 written and accumulated (beta = 1) at weight-gradient
#                 shapes (K = the tokens of a micro-batch): the preset's gemm_accumulate_serial measured
#   flash         the cuda flash attention kernels (gpu_tests "[.flash_timing]"), bf16 forward and backward
#   torch-sdpa    PyTorch's scaled_dot_product_attention at the same shapes: the reference
# Writes OUT/summary.json (steps with verdict and seconds; GEMM TFLOP/s beside
# torch's; step times beside torch's; cross-check and sanitizer lines) and one
# log per step (each at most 16 MiB), all in OUT itself.
# Usage: tools/gpu-check.sh [--timings] [--dry-run] [OUT]   (default OUT: $OUT, else gpu-check-out,
#        with --timings gpu-check-timings-out)
#   GPU_BUNDLE=DIR  the bundle (default gpu-bundle; env.sh is sourced unless
#                   PIPEBENCH_BUNDLE is already set)
# On the device tool: run(command="bash tools/gpu-check.sh", carry=["gpu-bundle"],
# timeout_s=590) after `bash tools/gpu-bundle.sh` here, then the same with
# --timings (docs/cuda-backend.md).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
source scripts/lib-help.sh
pipebench_help "$0" "$@"
part=first dry_run=0
while (($#)) && [[ $1 == --* ]]; do
  case $1 in
    --timings) part=timings ;;
    --dry-run) dry_run=1 ;;
    *) echo "gpu-check: unknown option $1 (--timings, --dry-run)" >&2; exit 2 ;;
  esac
  shift
done
budget=${GPU_CHECK_BUDGET_S:-540}
# NAME:SECONDS, in order. A part's budgets sum under its limit.
if [[ $part == first ]]; then
  plan=(load:20 memcheck-run:60 initcheck:45 racecheck:45 memcheck-schedules:60 gpu-tests:90 sticky-error:15
        schedules-2ranks-1gpu:50 llama-2ranks-1gpu:40 dp-4ranks-1gpu:40 tp-4ranks-1gpu:60)
else
  plan=(gemm:40 torch-gemm:60 baseline-1gpu:120 torch-gpt:90 pipeline-2ranks-1gpu:120 gemm-k-sweep:40 gemm-accumulate:40
        flash:15 torch-sdpa:15)
fi
planned=0
for p in "${plan[@]}"; do planned=$((planned + ${p#*:})); done
if ((dry_run)); then
  echo "gpu-check $part part: ${#plan[@]} steps, budgets summing to ${planned}s of ${budget}s"
  for p in "${plan[@]}"; do printf '  %-24s %4ss\n' "${p%%:*}" "${p#*:}"; done
fi
((planned <= budget)) || { echo "gpu-check: the $part part's budgets sum to ${planned}s, above its ${budget}s" >&2; exit 2; }
((dry_run)) && exit 0
budget_of() { local p; for p in "${plan[@]}"; do [[ ${p%%:*} == "$1" ]] && { echo "${p#*:}"; return; }; done; echo 0; }
default_out=gpu-check-out
[[ $part == timings ]] && default_out=gpu-check-timings-out
out=${1:-${OUT:-$default_out}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
if [[ -z ${PIPEBENCH_BUNDLE:-} ]]; then
  bundle=${GPU_BUNDLE:-gpu-bundle}
  [[ -f $bundle/env.sh ]] || { echo "gpu-check: no bundle at $bundle (make one with tools/gpu-bundle.sh)" >&2; exit 2; }
  source "$bundle/env.sh"
fi
export PIPEBENCH_SOURCE_DIR=$PWD OMPI_MCA_rmaps_base_oversubscribe=1
# PyTorch and the summary use the machine's own libraries, not the bundle's.
py() { env -u LD_LIBRARY_PATH python3 "$@"; }

declare -a steps=()
failed=0
step() {  # step NAME COMMAND...: runs within its budget (the plan's), logs to OUT/NAME.log
  local name=$1 limit
  limit=$(budget_of "$name")
  shift
  if ((limit == 0)); then echo "gpu-check: step $name is not in the $part part's plan" >&2; exit 2; fi
  if ((SECONDS + limit > budget)); then
    steps+=("$name SKIP 0 (left of the ${budget}s budget: $((budget - SECONDS))s, the step may take ${limit}s)")
    echo "=== $name: SKIPPED (time budget)"
    return 1
  fi
  local t0=$SECONDS
  echo
  echo "=== $name (at most ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  truncate -s '<16M' "$out/$name.log"
  tail -n 25 "$out/$name.log"
  local verdict=PASS
  if ((rc == 124 || rc == 137)); then verdict=TIMEOUT; elif ((rc != 0)); then verdict=FAIL; fi
  [[ $verdict == PASS ]] || failed=1
  steps+=("$name $verdict $((SECONDS - t0)) exit $rc")
  return "$rc"
}

echo "pipebench gpu-check on $(hostname), $(date -u +%FT%TZ), bundle $PIPEBENCH_BUNDLE"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader > "$out/gpu.txt" 2>&1 ||
  { cat "$out/gpu.txt"; echo "gpu-check: no NVIDIA GPU visible (nvidia-smi failed)" >&2; exit 7; }
cat "$out/gpu.txt"
pipebench --version > "$out/version.txt" 2>&1; head -3 "$out/version.txt"

# 4096 tokens (micro-batch 4 x seq 1024) through hidden 1024: qkv, fc1, LM head; then the square reference.
shapes=(4096 3072 1024 4096 4096 1024 4096 50304 1024 4096 4096 4096)
gpt=(--hidden 1024 --layers 24 --heads 16 --ffn 4096 --seq 1024 --vocab 50304 --mbs 4 --m 4 --dtype bf16)
job=jobs/gpu/gpt_350m_cuda.toml
if [[ $part == first ]]; then
  step load pipebench --version
  # Every kernel of one training step (embedding to loss, backward, AdamW) under memcheck, on one rank.
  step memcheck-run mpirun -np 1 -x LD_LIBRARY_PATH -x PIPEBENCH_SOURCE_DIR compute-sanitizer --tool memcheck \
    --error-exitcode 9 pipebench run tests/data/gpu/tiny.toml --run single -n 1 -w 0 -o "$out/memcheck"
  step initcheck compute-sanitizer --tool initcheck --error-exitcode 9 gpu_tests "cuda fp32 matches the cpu backend: single stage"
  step racecheck compute-sanitizer --tool racecheck --error-exitcode 9 gpu_tests "cuda fp32 matches the cpu backend: single stage"
  step memcheck-schedules compute-sanitizer --tool memcheck --error-exitcode 9 gpu_tests \
    "cuda: split backward and recomputation repeat the plain backward"
  step gpu-tests gpu_tests
  step sticky-error gpu_sticky_error
  # Interleaved 1F1B, ZB-H1, ZB-V, looped BFS, interleaved ZB, DualPipeV and recomputation as whole runs: 2 ranks on GPU 0
  # over MPI, every run's losses within 1e-4 of the baseline's (verify_results).
  step schedules-2ranks-1gpu bash -c 'env CUDA_VISIBLE_DEVICES=0 mpirun -np 2 -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH \
    -x PIPEBENCH_SOURCE_DIR pipebench run tests/data/gpu/tiny.toml --run single --run interleaved --run zb_h1 --run zb_v \
    --run looped_bfs --run single_reverse --run interleaved_zb --run dualpipev \
    --run recompute --run interleaved_recompute --set device.transport=mpi -o "$1" &&
    verify_results "$(find "$1" -name "*.h5" | head -1)" tests/data/gpu/tiny.toml 2 RUNS=10 LOSS_REL=1e-4' _ "$out/schedules"
  # The llama block (RMSNorm, RoPE, grouped-query attention, SwiGLU) as whole runs the same way.
  step llama-2ranks-1gpu bash -c 'env CUDA_VISIBLE_DEVICES=0 mpirun -np 2 -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH \
    -x PIPEBENCH_SOURCE_DIR pipebench run tests/data/gpu/tiny_llama.toml --run single --run two_stage --run zb_v \
    --run interleaved_recompute --set device.transport=mpi -o "$1" &&
    verify_results "$(find "$1" -name "*.h5" | head -1)" tests/data/gpu/tiny_llama.toml 2 RUNS=4 LOSS_REL=1e-4' _ "$out/llama"
  # Data parallelism: replicas' gradients host-staged over MPI, on the one GPU.
  step dp-4ranks-1gpu bash -c 'env CUDA_VISIBLE_DEVICES=0 mpirun -np 4 -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH \
    -x PIPEBENCH_SOURCE_DIR pipebench run tests/data/gpu/tiny.toml --run single --run dp2 --run pp2_dp2_overlap \
    --set device.transport=mpi -o "$1" &&
    verify_results "$(find "$1" -name "*.h5" | head -1)" tests/data/gpu/tiny.toml 4 RUNS=3 LOSS_REL=1e-4' _ "$out/dp"
  # Tensor parallelism: each stage's layers split over 2 tensor ranks, all on the one GPU (sums host-staged).
  step tp-4ranks-1gpu bash -c 'set -e; run() { env CUDA_VISIBLE_DEVICES=0 mpirun -np 4 -x CUDA_VISIBLE_DEVICES \
    -x LD_LIBRARY_PATH -x PIPEBENCH_SOURCE_DIR pipebench run "$@" --set device.transport=mpi; }
    run tests/data/gpu/tiny.toml --run single --run tp2 --run tp2_selective --run tp2_sp --run pp2_tp2 \
      --run pp2_tp2_zb_selective --run pp2_tp2_recompute -o "$1/gpt"
    verify_results "$(find "$1/gpt" -name "*.h5" | head -1)" tests/data/gpu/tiny.toml 4 RUNS=7 LOSS_REL=1e-4 \
      SAME_LOSS=tp2_selective:tp2
    run tests/data/gpu/tiny_llama.toml --run single --run tp2 --run tp2_selective --run pp2_tp2_zb_v \
      --set model.vocab=300 -o "$1/llama"
    verify_results "$(find "$1/llama" -name "*.h5" | head -1)" tests/data/gpu/tiny_llama.toml 4 RUNS=4 LOSS_REL=1e-4 \
      SAME_LOSS=tp2_selective:tp2 SET=model.vocab=300' _ "$out/tp"
else
  step gemm bench_cuda_gemm "${shapes[@]}"
  # The GPU's device preset (bench_cuda_gemm names it: core/device_preset.hpp's
  # device_preset_for_gpu), so that the baseline's report sets the hardware time model's step
  # beside the measured one (its "plan beside the measurement", docs/reports.md): how right the
  # time model is on this GPU. The preset changes no execution (the cuda backend ignores it).
  preset_name=$(sed -n 's/^time model: \([a-z0-9-]*\), .*/\1/p' "$out/gemm.log" | head -1)
  preset=()
  [[ -n $preset_name ]] && preset=(--set "device.preset=$preset_name")
  step torch-gemm env -u LD_LIBRARY_PATH python3 tools/torch_reference.py gemm "${shapes[@]}"
  step baseline-1gpu pipebench run "$job" --run baseline "${preset[@]}" -o "$out/results"
  step torch-gpt env -u LD_LIBRARY_PATH python3 tools/torch_reference.py gpt "${gpt[@]}"
  step pipeline-2ranks-1gpu env CUDA_VISIBLE_DEVICES=0 mpirun -np 2 -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH \
    -x PIPEBENCH_SOURCE_DIR pipebench run "$job" --run pp2 --set device.transport=mpi -o "$out/results"
  step gemm-k-sweep bench_cuda_gemm $(for k in 32 64 128 256 512 1024 2048 4096 8192; do echo 8192 8192 $k; done)
  step gemm-accumulate bench_cuda_gemm --accumulate 8192 8192 2048 8192 28672 4096 20480 10240 2048 8192 8192 8192
  # Flash attention at a Llama-8B head shape (32 query heads over 8 K/V heads of 128) and a short gpt one.
  attention=(bf16 1 8192 32 8 128 bf16 8 1024 16 16 64)
  step flash env PIPEBENCH_FLASH_SHAPES="${attention[*]}" gpu_tests "[.flash_timing]"
  step torch-sdpa env -u LD_LIBRARY_PATH python3 tools/torch_reference.py sdpa "${attention[@]}"
fi
if compgen -G "$out/results/*/*.h5" >/dev/null; then
  pipebench report "$out"/results/*/*.h5 -o "$out/report" > "$out/report.log" 2>&1 || true
fi

printf '%s\n' "${steps[@]}" > "$out/steps.txt"
py tools/gpu_check_summary.py "$out"

echo
echo "=== gpu-check $part part summary (${SECONDS}s of ${budget}s): $out/summary.json"
printf '  %s\n' "${steps[@]}"
exit $failed
