#!/usr/bin/env bash
# A backend is an instance, not a process (issue 37): no writable file-scope variable in the CUDA
# backend's objects. Everything it keeps lives in its instance (tb_cuda, src/kernels/cuda/common.h).
# nm's b/B/d/D symbols of the objects of src/kernels/cuda in BUILD_DIR (make CUDA=emu's build,
# or CUDA=1's), less what is no file-scope variable of ours: function-local statics, which in the
# emulator build are its stand-ins for kernels' __shared__ arrays (C++ names _ZZ...), nvcc's own
# launch stubs' guards and fat binary (_ZGVZ*__device_stub__*, __fatDeviceText,
# __cudaFatCubinHandle, __nv*), and the table itself,
# const (.data.rel.ro, read-only once relocated: D to nm). Exits 1 naming any other.
#   tests/check_cuda_state.sh BUILD_DIR
set -u
dir=${1:?usage: tests/check_cuda_state.sh BUILD_DIR}
objs=$(ls "$dir"/src/kernels/cuda/*.o 2>/dev/null)
[ -n "$objs" ] || { echo "check_cuda_state: no objects in $dir/src/kernels/cuda"; exit 1; }
bad=$(nm --defined-only $objs 2>/dev/null | awk '$2 ~ /^[bBdD]$/ {print $3}' |
      grep -v -E '^(tb_cuda_kernels$|_ZZ|_ZGVZ[0-9]+__device_stub__|__nv|__fatbin|__cuda)' |
      grep -v -E '^_ZL[0-9]+__(nv|fatDeviceText|cudaFatCubinHandle)' || true)
# the table must sit in a read-only section
ro=$(objdump -t "$dir"/src/kernels/cuda/table.o | awk '$NF == "tb_cuda_kernels" {print $(NF-2)}')
status=0
if [ -n "$bad" ]; then
    echo "check_cuda_state: writable file-scope state in src/kernels/cuda (put it in tb_cuda):"
    echo "$bad" | sed 's/^/  /'
    status=1
fi
case "$ro" in
.rodata*|.data.rel.ro*) ;;
*) echo "check_cuda_state: tb_cuda_kernels is in section '$ro', not a read-only one"; status=1 ;;
esac
[ $status -eq 0 ] && echo "check_cuda_state: no writable file-scope state in $dir/src/kernels/cuda"
exit $status
