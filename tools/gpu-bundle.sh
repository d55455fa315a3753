#!/usr/bin/env bash
# Makes the device bundle: one folder with everything the GPU checks need that
# the bare GPU machine lacks (it has CUDA 13 with cuBLAS, nvcc, CMake, ninja and
# a Python with PyTorch, but no Open MPI, HDF5, OpenBLAS or apt):
#   bin/      pipebench, the GPU test programs, bench_cuda_gemm, and Open MPI's
#             mpirun (orterun) and orted
#   lib/      every shared library they and Open MPI's plugins load, except
#             glibc's, the C++ runtime's and CUDA's (the machine's own are newer
#             or are the driver's), stripped
#   openmpi/  Open MPI's plugins (lib/openmpi3), help files (share/openmpi) and
#             configuration (etc); pmix/ the same for PMIx
#   env.sh    sets PATH, LD_LIBRARY_PATH, OPAL_* and PMIX_* so that Open MPI and
#             PMIx find their parts here, and CUDA's and NCCL's library folders
#             on the machine (/usr/local/cuda, or the NCCL of python3's
#             nvidia-nccl wheel)
# Usage: tools/gpu-bundle.sh [DIR] [--from-build BUILD] [--arch SM]
#   DIR           the bundle (default gpu-bundle, git-ignored); replaced
#   --from-build  bundle the programs of an existing build instead of building
#                 build-gpu-bundle (Release, PIPEBENCH_CUDA=ON, sm_90); the
#                 self-containment test (label bundle) bundles the default build
#   --arch        CUDA architecture of the build (default 90: H100/H200)
# Then: tar or carry DIR with the checkout; there, `source DIR/env.sh` and
# `bash tools/gpu-check.sh` (docs/cuda-backend.md, "The GPU check").
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib-help.sh; pipebench_help "$0" "$@"

dir=gpu-bundle build="" arch=90
while (($#)); do
  case $1 in
    --from-build) build=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    -*) echo "gpu-bundle: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) dir=$1; shift ;;
  esac
done
limit_mib=60

if [[ -z $build ]]; then
  build=build-gpu-bundle
  echo "== building $build (Release, CUDA sm_$arch)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPEBENCH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
        -DPIPEBENCH_BUILD_MICROBENCH=OFF >/dev/null
  cmake --build "$build" --target pipebench gpu_tests gpu_sticky_error verify_results bench_cuda_gemm
fi
[[ -x $build/bench/pipebench ]] || { echo "gpu-bundle: no $build/bench/pipebench" >&2; exit 2; }

rm -rf "$dir"
mkdir -p "$dir"/{bin,lib,openmpi/lib,openmpi/share,openmpi/etc,pmix/lib,pmix/share}
dir=$(cd "$dir" && pwd)

# The programs: pipebench and whichever GPU programs the build has.
programs=("$build/bench/pipebench")
for p in tests/gpu/gpu_tests tests/gpu/gpu_sticky_error tests/mpi/verify_results bench/bench_cuda_gemm; do
  [[ -x $build/$p ]] && programs+=("$build/$p")
done
cp "${programs[@]}" "$dir/bin/"

# Open MPI 4.1 (Debian's layout): the launcher and its daemon, plugins, help files.
ompi_libdir=$(dirname "$(readlink -f /usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so)")
ompi_pkglibdir=/usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
pmix_root=/usr/lib/x86_64-linux-gnu/pmix2
cp "$(readlink -f "$(command -v orterun)")" "$dir/bin/orterun"
cp "$(readlink -f "$(command -v orted)")" "$dir/bin/orted"
ln -s orterun "$dir/bin/mpirun"
ln -s orterun "$dir/bin/mpiexec"
cp -r "$ompi_pkglibdir" "$dir/openmpi/lib/openmpi3"
cp -r /usr/share/openmpi "$dir/openmpi/share/openmpi"
cp -r /etc/openmpi/. "$dir/openmpi/etc/"
cp -r "$pmix_root/lib/pmix" "$dir/pmix/lib/pmix"
cp -r "$pmix_root/share/pmix" "$dir/pmix/share/pmix" 2>/dev/null || true
cp "$pmix_root"/share/pmix-mca-params.conf "$dir/pmix/share/" 2>/dev/null || true
# Plugins for fabrics a single GPU node never uses drag in large libraries
# (UCX, libfabric, verbs, PSM); Open MPI falls back to shared memory and TCP.
for unused in ucx ofi openib psm psm2 usnic uct verbs portals4 cuda_ipc; do
  find "$dir/openmpi/lib/openmpi3" -name "mca_*_${unused}*.so" -delete
done
# OpenSHMEM (liboshmem) is not MPI: its frameworks go too.
find "$dir/openmpi/lib/openmpi3" \( -name 'mca_spml_*' -o -name 'mca_sshmem_*' -o -name 'mca_scoll_*' -o -name 'mca_atomic_*' -o -name 'mca_memheap_*' \) -delete

# Every shared library these load (ldd follows the dependencies of
# dependencies), but not glibc's, the C++ runtime's or CUDA's.
skip='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libresolv\.|libutil\.|libanl\.|libstdc\+\+|libgcc_s|libcuda\.|libnvidia|libcudart|libcublas|libcublasLt|libnccl|libnvrtc|libnvJitLink)'
mapfile -t elves < <(find "$dir/bin" "$dir/openmpi/lib" "$dir/pmix/lib" -type f \( -perm -u+x -o -name '*.so*' \))
declare -A have=()
for f in "${elves[@]}"; do
  while read -r name _ path _; do
    [[ -n ${path:-} && $path == /* ]] || continue
    [[ $name =~ $skip ]] && continue
    [[ -n ${have[$name]:-} ]] && continue
    have[$name]=1
    cp -L "$path" "$dir/lib/$name"
  done < <(LD_LIBRARY_PATH="$ompi_libdir:$pmix_root/lib" ldd "$f" 2>/dev/null | grep '=>')
done
# Open MPI's own libraries whose plugins open them by path (libmca_common_*).
cp -L "$ompi_libdir"/libmca_common_{sm,monitoring,ompio}.so* "$dir/lib/" 2>/dev/null || true

find "$dir" -type f \( -name '*.so*' -o -perm -u+x \) ! -name '*.sh' -exec strip --strip-unneeded {} + 2>/dev/null || true
# OpenBLAS carries kernels for every x86 generation (36 MiB): packed, and
# unpacked by env.sh on first use (xz, else python3's lzma).
[[ -f $dir/lib/libopenblas.so.0 ]] && xz -T0 -6 "$dir/lib/libopenblas.so.0"

cat > "$dir/env.sh" <<'ENV'
# source this: the bundle's programs, Open MPI and PMIx from this folder.
b=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$b/bin:$PATH"
cuda_libs=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
  [[ -d $d ]] && cuda_libs="$cuda_libs:$d"
done
# NCCL: the toolkit's, else the one PyTorch's nvidia-nccl wheel brings.
if ! ls /usr/local/cuda/lib*/libnccl.so.2 >/dev/null 2>&1 && command -v python3 >/dev/null; then
  nccl=$(env -u LD_LIBRARY_PATH python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null || true)
  [[ -n $nccl && -d $nccl ]] && cuda_libs="$cuda_libs:$nccl"
fi
export PIPEBENCH_BUNDLE="$b"
if [[ -f $b/lib/libopenblas.so.0.xz && ! -f $b/lib/libopenblas.so.0 ]]; then
  { xz -dc "$b/lib/libopenblas.so.0.xz" 2>/dev/null ||
    python3 -c 'import lzma, sys; sys.stdout.buffer.write(lzma.open(sys.argv[1]).read())' "$b/lib/libopenblas.so.0.xz"; } \
    > "$b/lib/libopenblas.so.0.tmp" && mv "$b/lib/libopenblas.so.0.tmp" "$b/lib/libopenblas.so.0"
fi
export LD_LIBRARY_PATH="$b/lib${cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$b/openmpi" OPAL_EXEC_PREFIX="$b/openmpi" OPAL_BINDIR="$b/bin" OPAL_LIBDIR="$b/lib"
export OPAL_PKGLIBDIR="$b/openmpi/lib/openmpi3" OPAL_DATAROOTDIR="$b/openmpi/share" OPAL_DATADIR="$b/openmpi/share"
export OPAL_PKGDATADIR="$b/openmpi/share/openmpi" OPAL_SYSCONFDIR="$b/openmpi/etc"
export PMIX_PREFIX="$b/pmix" PMIX_EXEC_PREFIX="$b/pmix" PMIX_LIBDIR="$b/lib" PMIX_PKGLIBDIR="$b/pmix/lib/pmix"
export PMIX_DATADIR="$b/pmix/share" PMIX_PKGDATADIR="$b/pmix/share/pmix" PMIX_SYSCONFDIR="$b/pmix/share"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mca_base_component_show_load_errors=0
ENV

size=$(du -sm "$dir" | cut -f1)
echo "bundle: $dir ($size MiB: $(ls "$dir/bin" | wc -l) programs, $(ls "$dir/lib" | wc -l) libraries, $(ls "$dir/openmpi/lib/openmpi3" | wc -l) Open MPI plugins)"
if ((size > limit_mib)); then
  echo "gpu-bundle: $size MiB is over the $limit_mib MiB the device call carries" >&2
  exit 1
fi
