"""GPU telemetry families shared by every vendor's collector (nvml, drm).

Dashboards and alerts use one set of names whatever made the GPU. Each device sample
is labelled by the exposition with namespace, pod, container, resource and device_id.
"""

from __future__ import annotations

from exporter.model import MetricKind, MetricSpec

__all__ = [
    "GPU_CLOCKS_THROTTLED",
    "GPU_DRAM_ACTIVE",
    "GPU_DRIVER_INFO",
    "GPU_ECC_ERRORS",
    "GPU_ENERGY",
    "GPU_FABRIC_HEALTH_ISSUE",
    "GPU_FABRIC_STATE",
    "GPU_FABRIC_STATUS",
    "GPU_GRAPHICS_ENGINE_ACTIVE",
    "GPU_MEMORY_BANDWIDTH_UTILIZATION",
    "GPU_MEMORY_TEMPERATURE",
    "GPU_MEMORY_TOTAL",
    "GPU_MEMORY_USED",
    "GPU_NVLINK_ERRORS",
    "GPU_NVLINK_LINKS",
    "GPU_NVLINK_RECEIVE",
    "GPU_NVLINK_TRANSMIT",
    "GPU_PCIE_RECEIVE",
    "GPU_PCIE_REPLAYS",
    "GPU_PCIE_TRANSMIT",
    "GPU_PIPE_ACTIVE",
    "GPU_POWER",
    "GPU_RECOVERY_ACTION",
    "GPU_REMAPPED_ROWS",
    "GPU_RETIRED_PAGES",
    "GPU_RETIRED_PAGES_PENDING",
    "GPU_ROW_REMAP_FAILED",
    "GPU_ROW_REMAP_PENDING",
    "GPU_SM_ACTIVE",
    "GPU_SM_CLOCK",
    "GPU_SM_OCCUPANCY",
    "GPU_TEMPERATURE",
    "GPU_UTILIZATION",
    "GPU_VIDEO_UTILIZATION",
    "GPU_XID_ERRORS",
    "GPU_XID_ERRORS_BY_CODE",
]

GPU_UTILIZATION = MetricSpec(
    "podresources_gpu_utilization_ratio",
    MetricKind.GAUGE,
    "Fraction of the last sample period the GPU was busy (0-1).",
)
GPU_VIDEO_UTILIZATION = MetricSpec(
    "podresources_gpu_video_utilization_ratio",
    MetricKind.GAUGE,
    "Fraction of the last sample period the GPU's video engines were busy (0-1), by engine "
    "(encoder, decoder).",
    labels=("engine",),
)
GPU_MEMORY_BANDWIDTH_UTILIZATION = MetricSpec(
    "podresources_gpu_memory_bandwidth_utilization_ratio",
    MetricKind.GAUGE,
    "Fraction of the last sample period the GPU's memory was being read or written (0-1).",
)
# Hopper and later GPUs' performance monitors (NVML's GPM): what DCGM calls its profiling
# fields (DCGM_FI_PROF_*), each a ratio over the time between the last two GPM samples,
# --collector.nvml.gpm-interval apart (the polls between serve it again).
GPU_GRAPHICS_ENGINE_ACTIVE = MetricSpec(
    "podresources_gpu_graphics_engine_active_ratio",
    MetricKind.GAUGE,
    "Fraction of the last GPM interval a graphics or compute context was active on the GPU "
    "or MIG device (0-1, NVML GPM, measured every --collector.nvml.gpm-interval).",
)
GPU_SM_ACTIVE = MetricSpec(
    "podresources_gpu_sm_active_ratio",
    MetricKind.GAUGE,
    "Fraction of the last GPM interval the SMs had at least one warp assigned, averaged "
    "over the SMs (0-1, NVML GPM, measured every --collector.nvml.gpm-interval).",
)
GPU_SM_OCCUPANCY = MetricSpec(
    "podresources_gpu_sm_occupancy_ratio",
    MetricKind.GAUGE,
    "Warps resident on the SMs against the most they can hold, averaged over the last GPM "
    "interval (0-1, NVML GPM, measured every --collector.nvml.gpm-interval).",
)
GPU_PIPE_ACTIVE = MetricSpec(
    "podresources_gpu_pipe_active_ratio",
    MetricKind.GAUGE,
    "Fraction of the last GPM interval the SMs' pipe was busy (0-1, NVML GPM, measured "
    "every --collector.nvml.gpm-interval), by pipe (tensor: any tensor core operation; "
    "fp64, fp32, fp16: non-tensor math).",
    labels=("pipe",),
)
GPU_DRAM_ACTIVE = MetricSpec(
    "podresources_gpu_dram_active_ratio",
    MetricKind.GAUGE,
    "Device memory bandwidth used over the last GPM interval against its peak (0-1, NVML "
    "GPM, measured every --collector.nvml.gpm-interval): a whole GPU's, or a MIG device's "
    "GPU instance's where the device is alone in it.",
)
GPU_PCIE_TRANSMIT = MetricSpec(
    "podresources_gpu_pcie_transmit_bytes_total",
    MetricKind.COUNTER,
    "Bytes the GPU sent over PCIe, headers included, since the exporter began measuring "
    "it (NVML GPM's rate over each --collector.nvml.gpm-interval, times its length).",
)
GPU_PCIE_RECEIVE = MetricSpec(
    "podresources_gpu_pcie_receive_bytes_total",
    MetricKind.COUNTER,
    "Bytes the GPU received over PCIe, headers included, since the exporter began "
    "measuring it (NVML GPM's rate over each --collector.nvml.gpm-interval, times its "
    "length).",
)
GPU_MEMORY_USED = MetricSpec(
    "podresources_gpu_memory_used_bytes", MetricKind.GAUGE, "GPU memory in use, in bytes."
)
GPU_MEMORY_TOTAL = MetricSpec(
    "podresources_gpu_memory_total_bytes", MetricKind.GAUGE, "GPU memory in total, in bytes."
)
GPU_POWER = MetricSpec(
    "podresources_gpu_power_watts", MetricKind.GAUGE, "GPU power draw, in watts."
)
GPU_ENERGY = MetricSpec(
    "podresources_gpu_energy_joules_total",
    MetricKind.COUNTER,
    "Energy the GPU consumed since the driver loaded, in joules.",
)
GPU_TEMPERATURE = MetricSpec(
    "podresources_gpu_temperature_celsius", MetricKind.GAUGE, "GPU temperature, in degrees Celsius."
)
GPU_MEMORY_TEMPERATURE = MetricSpec(
    "podresources_gpu_memory_temperature_celsius",
    MetricKind.GAUGE,
    "GPU memory temperature (its HBM or VRAM sensor), in degrees Celsius; GPUs with a "
    "memory sensor only.",
)
# What the driver asks be done for a GPU after a fault (nvml.h's
# nvmlDeviceGpuRecoveryAction_t, on drivers that have it): until it is done, the GPU
# cannot be trusted with new work, whatever else looks well.
GPU_RECOVERY_ACTION = MetricSpec(
    "podresources_gpu_recovery_action_id",
    MetricKind.GAUGE,
    "The recovery the NVIDIA driver asks for the GPU after a fault, as NVML gives it: 0 "
    "none, 1 reset the GPU, 2 reboot the node, 3 drain peer-to-peer traffic, 4 drain the "
    "GPU and reset it, 5 recover the IMEX domain, 6 reset the bus, 7 reboot the system; "
    "whole GPUs whose driver reports it.",
)
GPU_SM_CLOCK = MetricSpec(
    "podresources_gpu_sm_clock_hertz",
    MetricKind.GAUGE,
    "GPU streaming multiprocessor (graphics) clock, in hertz.",
)
GPU_CLOCKS_THROTTLED = MetricSpec(
    "podresources_gpu_clocks_throttled",
    MetricKind.GAUGE,
    "1 while the GPU holds its clocks down for the reason, else 0 (NVML clocks event "
    "reasons): sw_power_cap (the power limit), sw_thermal_slowdown, hw_thermal_slowdown, "
    "hw_slowdown (thermal or power by the hardware), hw_power_brake_slowdown (an external "
    "power brake), sync_boost (held with the GPUs of its sync-boost group).",
    labels=("reason",),
)
GPU_ECC_ERRORS = MetricSpec(
    "podresources_gpu_ecc_errors_total",
    MetricKind.COUNTER,
    "GPU memory ECC errors since the driver loaded, by type (corrected, uncorrected).",
    labels=("type",),
)
# A replay is a packet the GPU's PCIe link layer sent again because its receiver
# reported it bad or never acknowledged it: errors the link corrected, at the cost of
# bandwidth. A count that keeps climbing is a failing riser, slot or card.
GPU_PCIE_REPLAYS = MetricSpec(
    "podresources_gpu_pcie_replays_total",
    MetricKind.COUNTER,
    "PCIe packets the GPU's link sent again after errors, since the GPU was last reset "
    "(NVML's replay counter, nvidia-smi's Replays Since Reset; whole GPUs, not MIG devices).",
)
# NVLink: the GPU-to-GPU links of an SXM board (18 on an H100, through NVSwitches) or a
# bridge between PCIe cards. A link that drops out leaves collective operations
# (NCCL) to the remaining links, or to PCIe: a job spread over the GPUs slows or hangs.
GPU_NVLINK_LINKS = MetricSpec(
    "podresources_gpu_nvlink_links",
    MetricKind.GAUGE,
    "NVLinks of the GPU by state (active, inactive; unknown, only while NVML fails to "
    "give a link's state), as NVML reports each link it has; whole GPUs with NVLink and "
    "MIG off (NVML misreports a MIG-enabled GPU's links).",
    labels=("state",),
)
GPU_NVLINK_ERRORS = MetricSpec(
    "podresources_gpu_nvlink_errors_total",
    MetricKind.COUNTER,
    "NVLink errors of the GPU, all links together, by type, since the counters were last "
    "reset. Before Blackwell: crc_flit, crc_data (CRC errors of flow-control and data "
    "flits), replay (flits sent again), recovery (link retrainings), ecc_data (data ECC "
    "errors). From Blackwell (NVLink 5): recovery, recovery_failed (the link went down), "
    "symbol, effective (errors FEC did not correct, in symbols and in packets), "
    "malformed_packet, buffer_overrun, receive, receive_remote, receive_general, "
    "local_link_integrity, transmit_discard, ecc_data.",
    labels=("type",),
)
# On an NVSwitch system (HGX), Fabric Manager registers each GPU with the NVLink fabric
# after boot or a reset; until it has initialised the system CUDA does not start
# (cudaErrorSystemNotReady), and a GPU whose registration fails loses its NVLink peers.
GPU_FABRIC_STATE = MetricSpec(
    "podresources_gpu_fabric_state_id",
    MetricKind.GAUGE,
    "The GPU's registration with the NVLink fabric of an NVSwitch system, as NVML gives "
    "it: 1 not started, 2 in progress, 3 completed; GPUs in such a fabric, MIG off.",
)
GPU_FABRIC_STATUS = MetricSpec(
    "podresources_gpu_fabric_status_code",
    MetricKind.GAUGE,
    "The outcome of the GPU's completed fabric registration, nvml.h's nvmlReturn_t: 0 "
    "success, any other an error (nvidia-smi -q's Fabric Status names it); none before "
    "the registration completes.",
)
# The fabric's own view of a registered GPU's NVLink paths (nvml.h's health mask, R550
# on): an NVSwitch fault leaves the GPU registered and running, with less bandwidth or a
# route being recovered, which DCGM's health check counts as a failure.
GPU_FABRIC_HEALTH_ISSUE = MetricSpec(
    "podresources_gpu_fabric_health_issue",
    MetricKind.GAUGE,
    "1 while the GPU's NVLink fabric reports this problem with it, else 0: "
    "degraded_bandwidth, route_recovery (a route to it being recovered), route_unhealthy, "
    "access_timeout_recovery, incorrect_configuration (nvidia-smi -q's Fabric section "
    "says which); none for a problem the driver or fabric does not report.",
    labels=("issue",),
)
GPU_NVLINK_TRANSMIT = MetricSpec(
    "podresources_gpu_nvlink_transmit_bytes_total",
    MetricKind.COUNTER,
    "Data the GPU sent over its NVLinks, all links together, in bytes (NVML's data "
    "throughput counter, without protocol overhead).",
)
GPU_NVLINK_RECEIVE = MetricSpec(
    "podresources_gpu_nvlink_receive_bytes_total",
    MetricKind.COUNTER,
    "Data the GPU received over its NVLinks, all links together, in bytes (NVML's data "
    "throughput counter, without protocol overhead).",
)
# Row remapping (NVIDIA Ampere and later): a row of GPU memory that gave errors is
# replaced by a spare one at the next GPU reset. NVIDIA's memory error management guide
# sets the failure flag when an uncorrectable error's row cannot be remapped (its bank
# already has 8 such rows, or the row was remapped before, or after 512 in all).
GPU_REMAPPED_ROWS = MetricSpec(
    "podresources_gpu_remapped_rows",
    MetricKind.GAUGE,
    "GPU memory rows remapped to spare rows over the GPU's life, by the errors that "
    "caused it (cause: correctable, uncorrectable), as recorded in its InfoROM.",
    labels=("cause",),
)
GPU_ROW_REMAP_PENDING = MetricSpec(
    "podresources_gpu_row_remap_pending",
    MetricKind.GAUGE,
    "1 while a row remapping waits for a GPU reset to take effect, else 0.",
)
GPU_ROW_REMAP_FAILED = MetricSpec(
    "podresources_gpu_row_remap_failed",
    MetricKind.GAUGE,
    "1 once a row remapping has failed on the GPU, else 0 (NVIDIA's RMA criterion, when "
    "its field diagnostic confirms it).",
)
# Page retirement, the row remapping of GPUs before Ampere (NVIDIA's dynamic page
# retirement guide): a page that gave a double-bit or two single-bit ECC errors is
# retired, and set aside when the GPU is next attached.
GPU_RETIRED_PAGES = MetricSpec(
    "podresources_gpu_retired_pages",
    MetricKind.GAUGE,
    "GPU memory pages retired over the GPU's life, by the errors that caused it (cause: "
    "multiple_single_bit_ecc, double_bit_ecc), as recorded in its InfoROM; GPUs before "
    "Ampere.",
    labels=("cause",),
)
GPU_RETIRED_PAGES_PENDING = MetricSpec(
    "podresources_gpu_retired_pages_pending",
    MetricKind.GAUGE,
    "1 while retired pages wait to be set aside at the GPU's next attach (a driver reload, "
    "GPU reset or reboot), else 0; after a double-bit error no new CUDA context starts on "
    "the GPU until then.",
)
GPU_DRIVER_INFO = MetricSpec(
    "podresources_gpu_driver_info",
    MetricKind.GAUGE,
    "The GPU driver the node runs, always 1: its vendor, version, and the newest CUDA "
    "version it supports (NVIDIA only, empty otherwise).",
    labels=("vendor", "version", "cuda_version"),
)
GPU_XID_ERRORS = MetricSpec(
    "podresources_gpu_xid_errors_total",
    MetricKind.COUNTER,
    "Xid errors the NVIDIA driver reported for the GPU since the exporter began to watch "
    "it, from 0 (NVML Xid events).",
)
GPU_XID_ERRORS_BY_CODE = MetricSpec(
    "podresources_gpu_xid_errors_by_code_total",
    MetricKind.COUNTER,
    "The same Xid errors by Xid code; a code's series appears with its first error.",
    labels=("xid",),
)
