#!/usr/bin/env bash
# run_gpu.sh MODE GPU_TESTS RUN_AND_VERIFY MPIEXEC PIPEBENCH VERIFY JOB OUTDIR
#   np1            1 rank, --backend cuda: baseline run, results checked (events, memory == plan)
#   np2_mpi        2 ranks on GPU 0 with the MPI transport (host staging): both runs,
#                  the pipeline's losses within 1e-4 of the baseline's
#   np2_schedules  2 ranks on GPU 0 with the MPI transport: interleaved 1F1B, ZB-H1, ZB-V (the
#                  V's turn handed over on the device), recomputation; losses within 1e-4 of
#                  the baseline's
#   np2_dp         2 replicas of one stage on GPU 0 (gradients host-staged over MPI): losses within
#                  1e-4 of the baseline's on the same micro-batches
#   np4_dp         2 stages x 2 replicas on GPU 0, interleaved 1F1B, the reduction overlapped
#   np2_nccl       2 ranks on 2 GPUs with NCCL (skipped with fewer than 2 GPUs)
#   np2_nccl_schedules  the same schedules over NCCL on 2 GPUs (device buffers, grouped transfers
#                  of two chunks per pair)
#   np4_nccl       4 ranks on 4 GPUs with NCCL, 1F1B and eager 1F1B on 4 stages: the grouped
#                  transfers of the middle ranks (skipped with fewer than 4 GPUs)
#   np2_nccl_dp    2 replicas of one stage on 2 GPUs: the gradients all-reduced over the data
#                  group's NCCL communicator in device memory, after the flush and (dp2_buckets)
#                  bucket by bucket inside the last backward, bit for bit the same losses, the
#                  first bucket launched inside that action (check_bucket_launch.py)
#                  (skipped with fewer than 2 GPUs)
#   np4_nccl_dp    2 stages x 2 replicas on 4 GPUs: each pipeline its own NCCL communicator, each
#                  stage's data group its own, the reduction overlapped (skipped with fewer than 4 GPUs)
#   np4_tp         tensor parallelism (issue 37) on GPU 0, the layers' sums host-staged over MPI:
#                  t 2 (and selective recomputation, bit for bit the plain run; sequence
#                  parallelism), p 2 x t 2 interleaved, ZB-H1 with selective and sequence
#                  parallelism, 1F1B with full recomputation; losses
#                  within 1e-4 of the baseline's
#   np2_nccl_tp    t 2 on 2 GPUs, the sums over the tensor group's NCCL communicator (skipped
#                  with fewer than 2 GPUs)
#   np4_nccl_tp    p 2 x t 2 on 4 GPUs over NCCL (skipped with fewer than 4 GPUs)
#   refuse_shared  2 ranks made to share GPU 0 with NCCL: exit 7 and a message that says how to launch
# Exits 77 (skipped) when no usable GPU is visible.
set -uo pipefail
mode=$1 gpu_tests=$2 run_and_verify=$3 mpiexec=$4 pipebench=$5 verify=$6 job=$7 outdir=$8
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

out=$("$gpu_tests" --list-tests 2>&1)
if [[ $? -eq 77 ]]; then
  echo "$out" | head -1
  exit 77
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then gpus=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .); fi

# need_gpus N WHAT: skips (exit 77) unless N GPUs are visible, saying what needs them.
need_gpus() {
  if ((gpus < $1)); then
    echo "SKIP: $2: $1 GPUs needed, this machine shows $gpus"
    exit 77
  fi
}

case $mode in
  np1)
    exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 1 "$job" "$outdir" 0 --run single -- RUNS=1 ;;
  np2_mpi)
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 2 "$job" \
      "$outdir" 0 --run single --run two_stage --set device.transport=mpi -- RUNS=2 LOSS_REL=1e-4 ;;
  np2_schedules)
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 2 "$job" \
      "$outdir" 0 --run single --run interleaved --run zb_h1 --run zb_v --run looped_bfs --run single_reverse \
      --run interleaved_zb --run dualpipev --run recompute --run interleaved_recompute --set device.transport=mpi -- RUNS=10 LOSS_REL=1e-4 ;;
  np2_dp)
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 2 "$job" \
      "$outdir" 0 --run single --run dp2 --run dp2_zero1 --set device.transport=mpi -- RUNS=3 LOSS_REL=1e-4 ;;
  np4_dp)
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 4 "$job" \
      "$outdir" 0 --run single --run pp2_dp2_overlap --set device.transport=mpi -- RUNS=2 LOSS_REL=1e-4 ;;
  np2_nccl)
    need_gpus 2 "the nccl transport"
    exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 2 "$job" "$outdir" 0 --run single --run two_stage -- \
      RUNS=2 LOSS_REL=1e-4 ;;
  np2_nccl_schedules)
    need_gpus 2 "the nccl transport"
    exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 2 "$job" "$outdir" 0 --run single --run interleaved \
      --run zb_h1 --run zb_v --run recompute -- RUNS=5 LOSS_REL=1e-4 ;;
  np2_nccl_dp)
    need_gpus 2 "2 replicas reducing over NCCL"
    exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 2 "$job" "$outdir" 0 --run single --run dp2 \
      --run dp2_buckets --run dp2_zero1 -- RUNS=4 LOSS_REL=1e-4 SAME_LOSS=dp2_buckets:dp2 -- \
      bash -c '/usr/bin/python3 "$1/check_bucket_launch.py" "$0" dp2_buckets' "$(dirname "$run_and_verify")" ;;
  np4_nccl_dp)
    need_gpus 4 "2 stages x 2 replicas over NCCL"
    exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 4 "$job" "$outdir" 0 --run single --run pp2_dp2_overlap -- \
      RUNS=2 LOSS_REL=1e-4 ;;
  np4_nccl)
    need_gpus 4 "4 stages over NCCL"
    exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 4 "$job" "$outdir" 0 --run single --run four_stage \
      --run four_stage_eager -- RUNS=3 LOSS_REL=1e-4 ;;
  np4_tp)
    CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 4 "$job" \
      "$outdir" 0 --run single --run tp2 --run tp2_selective --run tp2_sp --run pp2_tp2 --run pp2_tp2_zb_selective \
      --run pp2_tp2_recompute --set device.transport=mpi -- RUNS=7 LOSS_REL=1e-4 SAME_LOSS=tp2_selective:tp2 ;;
  np2_nccl_tp)
    need_gpus 2 "2 tensor ranks summing over NCCL"
    exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 2 "$job" "$outdir" 0 --run single --run tp2 \
      --run tp2_selective --run tp2_sp -- RUNS=4 LOSS_REL=1e-4 SAME_LOSS=tp2_selective:tp2 ;;
  np4_nccl_tp)
    need_gpus 4 "2 stages x 2 tensor ranks over NCCL"
    exec "$run_and_verify" "$mpiexec" "$pipebench" "$verify" 4 "$job" "$outdir" 0 --run single --run pp2_tp2 \
      --run pp2_tp2_zb_selective -- RUNS=3 LOSS_REL=1e-4 ;;
  refuse_shared)
    msg=$(CUDA_VISIBLE_DEVICES=0 "$mpiexec" -np 2 --oversubscribe -x CUDA_VISIBLE_DEVICES "$pipebench" run "$job" \
          -o "$outdir" --run single --run two_stage 2>&1)
    rc=$?
    echo "$msg"
    [[ $rc -eq 7 ]] || { echo "FAIL: exit $rc, expected 7"; exit 1; }
    grep -q "share GPU" <<<"$msg" || { echo "FAIL: no 'share GPU' in the message"; exit 1; }
    grep -q "device.transport=mpi" <<<"$msg" || { echo "FAIL: the message does not say how to fix the launch"; exit 1; }
    echo PASS ;;
  *) echo "unknown mode $mode"; exit 2 ;;
esac
