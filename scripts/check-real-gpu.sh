#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: everything the project can check only there, in one go.
#
#   scripts/check-real-gpu.sh [--provoke-xid] [OUT_DIR]
#       (from the repository root, after `make venv`; or with the packages on PYTHONPATH)
#
# 1. The NVML tests: the real-driver checks (nvidia-smi and the kernel as witnesses, a
#    CUDA process, the exporter with a simulated kubelet holding the real GPU) and the
#    fake-library tests beside them in the same process. The exporter's pages from the
#    real-driver test go to OUT_DIR/metrics.txt and OUT_DIR/allocations.json.
# 2. bench/nvml_calls.py: what each NVML call the collectors make costs on this driver;
#    bench/nvml_intervals.py: what reading the energy counter and GPM less often saves;
#    bench/exporter_on_gpu.py: the whole exporter's CPU over a minute at its defaults.
# 3. tests/collectors/nvml/real_driver_probe.py: what the collectors read, and each
#    poll's time, into OUT_DIR/probe.json.
# 4. scripts/capture_fixtures.py: this machine's /sys and /proc, reduced to the files
#    the collectors read, into OUT_DIR/capture (a candidate for tests/fixtures/captured).
#
# --provoke-xid also runs a CUDA kernel that faults on purpose, so that the driver reports
# Xid 31 on the first GPU, and checks that it is counted once. The GPU carries on, but
# its Xid log (and any Xid alert) will show it: only where that is welcome.
#
# Needs nvidia-smi and gcc; takes about three minutes. Prints figures; records nothing.
set -u
if [ "${1:-}" = --provoke-xid ]; then
  export PODRESOURCES_PROVOKE_XID=1
  shift
fi
out=${1:-/tmp/podresources-gpu-check}
python=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 GRPC_VERBOSITY=ERROR
mkdir -p "$out"
command -v nvidia-smi >/dev/null || { echo "no nvidia-smi: this machine has no NVIDIA driver" >&2; exit 1; }

echo "== the machine"
nvidia-smi --query-gpu=index,uuid,name,pci.bus_id,driver_version,mig.mode.current --format=csv
uname -r

echo "== NVML tests"
export PODRESOURCES_REAL_GPU_PAGES="$out"  # the exporter's /metrics and /debug/allocations there
"$python" -m pytest -p no:cacheprovider -q -rs tests/collectors/nvml tests/collectors/test_gpu_processes.py
tests=$?

echo "== the cost of each NVML call (GPU 0)"
"$python" bench/nvml_calls.py

echo "== what the energy and GPM intervals save"
"$python" bench/nvml_intervals.py

echo "== the whole exporter's CPU at its defaults, a pod holding GPU 0"
"$python" bench/exporter_on_gpu.py

echo "== the collectors' readings, 21 polls"
"$python" tests/collectors/nvml/real_driver_probe.py --polls 21 --interval 0 >"$out/probe.json"
"$python" - "$out/probe.json" <<'EOF'
import json, statistics, sys
probe = json.load(open(sys.argv[1]))
print("Xid event registration:", probe.pop("xid_registration"))
for name, polls in probe.items():
    ms = [poll["duration_s"] * 1000 for poll in polls]
    errors = sorted({poll["error"] for poll in polls if poll["error"]})
    issues = sorted({i for poll in polls for i in poll.get("issues", ())})
    print(f"{name}: first poll {ms[0]:.1f} ms, then median {statistics.median(ms[1:]):.2f} ms;"
          f" errors {errors or 'none'}; issues {issues or 'none'}")
EOF

echo "== a capture of /sys and /proc"
rm -rf "$out/capture"
"$python" scripts/capture_fixtures.py "$out/capture"
echo "probe and capture in $out"
exit $tests
