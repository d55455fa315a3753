#!/usr/bin/env bash
# The GPU check of the cuda backend and the NCCL transport, for a machine
# with at least one NVIDIA GPU (about 5-8 minutes on one H200 from a clean
# clone). Steps, each PASS or FAIL in the summary at the end:
#   1. build (Release, PIPEBENCH_CUDA=ON, for this GPU's architecture) into build-gpu/
#   2. the GPU-labelled tests: cuda vs cpu on a tiny model (fp32 losses and
#      gradient norms within 1e-4, bf16/fp16 losses within 2e-2 over 5 steps),
#      memory == plan, OOM, and whole `pipebench run --backend cuda` programs
#   3. cuBLAS GEMM TFLOP/s (fp32, bf16, fp16) at the workload's shapes
#   4. the 1-GPU baseline of jobs/gpu/gpt_350m_cuda.toml (350M GPT, bf16):
#      step time, model TFLOP/s and peak memory
#   5. its 2-stage pipeline as 2 ranks on GPU 0 with the MPI transport (NCCL
#      refuses one GPU twice), so the executor runs on the device
#   6. with 2 or more GPUs: the same pipeline over NCCL
# Usage: tools/gpu-check.sh [OUTDIR]   (results and logs; default gpu-check-out)
# Needs the build dependencies of scripts/bootstrap.sh (installed here when
# missing and apt can reach a mirror) and the CUDA toolkit under /usr/local/cuda.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
out=${1:-gpu-check-out}
build=${PIPEBENCH_GPU_BUILD:-build-gpu}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
declare -a summary=()
failed=0
step() {  # step NAME COMMAND...: runs, logs to $out/NAME.log, records PASS/FAIL
  local name=$1
  shift
  local t0=$SECONDS
  echo
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  local verdict=PASS
  ((rc == 0)) || { verdict="FAIL (exit $rc)"; failed=1; }
  summary+=("$(printf '%-22s %-16s %4ds' "$name" "$verdict" $((SECONDS - t0)))")
  return "$rc"
}

echo "pipebench gpu-check $(git rev-parse --short HEAD 2>/dev/null) on $(hostname), $(date -u +%FT%TZ)"
if ! nvidia-smi -L; then
  echo "gpu-check: no NVIDIA GPU visible (nvidia-smi -L failed); nothing to check" >&2
  exit 7
fi
gpus=$(nvidia-smi -L | grep -c '^GPU')
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.[:space:]')
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

build_all() {
  local pkgs=(cmake ninja-build g++ pkg-config libopenmpi-dev openmpi-bin libhdf5-dev libtoml11-dev libcli11-dev
              libfmt-dev libopenblas-dev catch2)
  local missing=()
  if command -v dpkg-query >/dev/null; then
    for p in "${pkgs[@]}"; do
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
  fi
  if ((${#missing[@]})); then
    echo "installing ${missing[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" ||
      { echo "gpu-check: cannot install ${missing[*]}" >&2; return 1; }
  fi
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPEBENCH_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES="${arch:-90}" -DPIPEBENCH_BUILD_MICROBENCH=OFF &&
    cmake --build "$build" -j "$(nproc)" --target pipebench gpu_tests verify_results bench_cuda_gemm
}

# The gpu tests; skipping the cross-check (no usable GPU after all) is a failure here.
gpu_tests() {
  local log="$out/ctest-gpu.txt"
  ctest --test-dir "$build" -L gpu --output-on-failure -V >"$log" 2>&1
  local rc=$?
  grep -E "SKIP|Passed|Failed|Skipped|tests passed" "$log"
  if grep -q "gpu.cross_check .*Skipped" "$log"; then
    echo "FAIL: gpu.cross_check was skipped: $(grep -m1 'SKIP:' "$log")"
    return 1
  fi
  return $rc
}

if step build build_all; then
  step gpu-tests gpu_tests
  # 4096 tokens (micro-batch 4 x seq 1024) through hidden 1024: qkv, fc1, LM head; then the square reference.
  step gemm "$build/bench/bench_cuda_gemm" 4096 3072 1024 4096 4096 1024 4096 50304 1024 4096 4096 4096
  step baseline-1gpu "$build/bench/pipebench" run jobs/gpu/gpt_350m_cuda.toml --run baseline -o "$out/results"
  step pipeline-2ranks-1gpu env CUDA_VISIBLE_DEVICES=0 mpirun -np 2 -x CUDA_VISIBLE_DEVICES \
    "$build/bench/pipebench" run jobs/gpu/gpt_350m_cuda.toml --set device.transport=mpi -o "$out/results"
  if ((gpus >= 2)); then
    step pipeline-nccl-2gpus mpirun -np 2 "$build/bench/pipebench" run jobs/gpu/gpt_350m_cuda.toml -o "$out/results"
  else
    summary+=("$(printf '%-22s %-16s' pipeline-nccl-2gpus "SKIP (1 GPU)")")
  fi
fi

echo
echo "=== gpu-check summary ($gpus GPU(s), sm_${arch:-?}, ${SECONDS}s)"
printf '%s\n' "${summary[@]}"
grep -h -E "step time median|model TFLOP/s|peak mem|^\s+[0-9]+ +[0-9]+-[0-9]+ " "$out"/baseline-1gpu.log "$out"/pipeline-*.log 2>/dev/null
exit $failed
