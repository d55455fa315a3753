#!/usr/bin/env bash
# Stands in for "mpirun -np N" in the probe's unit tests: it ignores the
# pipebench command it is given, reads micro_batch_size=B from it, and
# behaves as the environment says:
#   FAKE_LIMIT=L        B <= L runs (exit 0), B > L prints an OOM message (exit 5)
#   FAKE_ERROR_FROM=E   B >= E exits 2 with a usage error (no OOM signature)
#   FAKE_NAN_AT=N       B == N fails with a NaN loss (exit 5)
#   FAKE_SLEEP_AT=S     B == S sleeps 60 s (for the trial timeout)
#   FAKE_DELAY=D        every trial takes D seconds (for progress reports)
shift  # the {ranks} argument
mbs=$(printf '%s\n' "$@" | sed -n 's/^run\.[^.]*\.micro_batch_size=\([0-9]*\)$/\1/p')
[[ -n $mbs ]] || { echo "fake_trial: no micro_batch_size in: $*"; exit 99; }
if [[ -n ${FAKE_SLEEP_AT:-} && $mbs -eq $FAKE_SLEEP_AT ]]; then sleep 60; fi
if [[ -n ${FAKE_DELAY:-} ]]; then sleep "$FAKE_DELAY"; fi
if [[ -n ${FAKE_ERROR_FROM:-} && $mbs -ge $FAKE_ERROR_FROM ]]; then
  echo "pipebench: invalid workload: probe.toml:3: model.hiden: unknown key"; exit 2
fi
if [[ -n ${FAKE_NAN_AT:-} && $mbs -eq $FAKE_NAN_AT ]]; then
  echo "  -- pipe: status failed (nan on rank 1): rank 1: loss of micro-batch 0 at step 0 is nan"; exit 5
fi
if (( mbs > ${FAKE_LIMIT:-1000000} )); then
  echo "  -- pipe: status failed (oom on rank 0): rank 0: out of memory: tried to allocate 1.00 GiB"; exit 5
fi
echo "  -- pipe: status ok"
