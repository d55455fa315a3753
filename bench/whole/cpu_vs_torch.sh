#!/usr/bin/env bash
# pipebench's cpu backend against PyTorch on the same training step: the GPT of
# docs/cpu-backend.md (bench/whole/torch_gpt_step.py is its PyTorch twin) and
# the llama block (bench/whole/torch_llama_step.py, tools/torch_llama.py),
# fp32, AdamW, clipping, one thread each, both pinned to one core, run in
# interleaved pairs (pipebench then PyTorch, then the other way round) so a
# machine's drift hits both alike. For each shape: every pair's ratio
# pipebench / PyTorch of the median step time, their median and range.
# Needs a build in build/ and python3-torch (Debian); skips with a reason
# (exit 77) without it.
# Usage: bench/whole/cpu_vs_torch.sh [PAIRS]   (default 5; CORE=N to pin elsewhere,
#        SHAPE=default_job, h512_s256 or llama_h512 for one shape only)
set -euo pipefail
cd "$(dirname "$0")/../.."
pairs=${1:-5}
core=${CORE:-0}
python=/usr/bin/python3
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "SKIP: PyTorch is not installed for $python (Debian: apt-get install python3-torch)"
  exit 77
fi
[[ -x build/bench/pipebench ]] || { echo "no build/bench/pipebench: run scripts/bootstrap.sh first" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
warmup=1 steps=3

# kind name hidden layers heads kv_heads ffn seq vocab micro_batch_size micro-batches (gpt: kv_heads unused)
shapes=("gpt default_job 256 8 4 4 1024 128 4096 2 4" "gpt h512_s256 512 4 8 8 2048 256 4096 4 4"
        "llama llama_h512 512 4 8 2 1536 256 4096 4 4")

# Median step time of pipebench's single-stage run of that shape, seconds.
pipebench_step() {
  local kind=$1 h=$2 L=$3 heads=$4 kv=$5 f=$6 s=$7 V=$8 mbs=$9 m=${10} dir=$out/pb.$RANDOM job=jobs/default.toml extra=()
  if [[ $kind == llama ]]; then job=jobs/llama_cpu.toml extra=(--set model.kv_heads="$kv"); fi
  taskset -c "$core" build/bench/pipebench run $job --run single_stage_baseline -o "$dir" "${extra[@]}" \
    -w $warmup -n $steps --set model.hidden="$h" --set model.layers="$L" --set model.heads="$heads" \
    --set model.ffn_hidden="$f" --set model.seq_len="$s" --set model.vocab="$V" \
    --set run.single_stage_baseline.micro_batch_size="$mbs" --set run.single_stage_baseline.num_microbatches="$m" \
    --set "run.two_stage_pipeline.layers_per_stage=[$((L / 2)),$((L - L / 2))]" >/dev/null
  "$python" -c "import glob,h5py,sys; f=h5py.File(glob.glob(sys.argv[1]+'/*/*.h5')[0]); \
print(f['runs/single_stage_baseline'].attrs['step_time_median_s'])" "$dir"
}

torch_step() {
  local kind=$1 h=$2 L=$3 heads=$4 kv=$5 f=$6 s=$7 V=$8 mbs=$9 m=${10}
  if [[ $kind == llama ]]; then
    taskset -c "$core" "$python" bench/whole/torch_llama_step.py "$h" "$L" "$heads" "$kv" "$f" "$s" "$V" "$mbs" "$m" $warmup $steps
  else
    taskset -c "$core" "$python" bench/whole/torch_gpt_step.py "$h" "$L" "$heads" "$f" "$s" "$V" "$mbs" "$m" $warmup $steps
  fi
}

echo "cpu_vs_torch: $pairs interleaved pairs per shape, core $core, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "pipebench $(build/bench/pipebench --version | head -1 | cut -d' ' -f2), PyTorch $("$python" -c 'import torch; print(torch.__version__)')," \
     "PIPEBENCH_CPU_KERNELS=${PIPEBENCH_CPU_KERNELS:-auto}"
for shape in "${shapes[@]}"; do
  read -r kind name h L heads kv f s V mbs m <<<"$shape"
  [[ -z ${SHAPE:-} || $SHAPE == "$name" ]] || continue
  ratios=()
  for ((i = 0; i < pairs; i++)); do
    if ((i % 2 == 0)); then
      pb=$(pipebench_step "$kind" "$h" "$L" "$heads" "$kv" "$f" "$s" "$V" "$mbs" "$m")
      pt=$(torch_step "$kind" "$h" "$L" "$heads" "$kv" "$f" "$s" "$V" "$mbs" "$m")
    else
      pt=$(torch_step "$kind" "$h" "$L" "$heads" "$kv" "$f" "$s" "$V" "$mbs" "$m")
      pb=$(pipebench_step "$kind" "$h" "$L" "$heads" "$kv" "$f" "$s" "$V" "$mbs" "$m")
    fi
    ratios+=("$pb $pt")
    awk -v n="$name" -v i=$((i + 1)) -v pb="$pb" -v pt="$pt" \
      'BEGIN { printf "  %-12s pair %d: pipebench %.3f s, PyTorch %.3f s, ratio %.3f\n", n, i, pb, pt, pb / pt }'
  done
  printf '%s\n' "${ratios[@]}" | "$python" -c "
import statistics, sys
pairs = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
r = sorted(pb / pt for pb, pt in pairs)
print(f'$name (h$h L$L s$s mbs$mbs x$m): pipebench/PyTorch median {statistics.median(r):.3f} '
      f'(range {r[0]:.3f}-{r[-1]:.3f}); step pipebench {statistics.median(p for p, _ in pairs):.3f} s, '
      f'PyTorch {statistics.median(t for _, t in pairs):.3f} s')"
done
