/*
 * A fake libnvidia-ml.so.1 for tests: the C ABI pynvml binds to, answering from a
 * text file instead of a GPU.
 *
 * Every exported name is the symbol pynvml (nvidia-ml-py 13.x) resolves, with the
 * versioned suffixes it asks for (nvmlDeviceGetCount_v2, ...GetHandleByIndex_v2,
 * ...GetPciInfo_v3, ...GetMemoryInfo_v2). Structures mirror pynvml's ctypes
 * Structures field by field; fakeNvmlStructSize lets a test compare their sizes.
 *
 * nvmlInit (re)reads the file named by FAKE_NVML_CONFIG. Without that variable it
 * answers NVML_ERROR_DRIVER_NOT_LOADED, like a node whose driver is not loaded, so a
 * test elsewhere in the same process never sees these fake GPUs by accident.
 *
 * Config, one directive a line, '#' starts a comment:
 *   init_error CODE          nvmlInit fails with CODE
 *   driver_version TEXT      nvmlSystemGetDriverVersion (default 580.82.07). An R535
 *                            driver ("535.*") fills the _v3 process lists with R535's
 *                            32-byte nvmlProcessInfo_v3_t, as CUDA 12.2's nvml.h
 *                            declares it; other drivers, and every _v2 list, 24 bytes
 *   event_set_error CODE [PATH]  nvmlEventSetCreate fails with CODE (while PATH exists)
 *   cuda_error CODE PATH     nvmlSystemGetCudaDriverVersion fails with CODE while PATH
 *                            exists (nvml.h gives it no such error; pynvml can raise)
 *   event_wait_error CODE PATH  nvmlEventSetWait_v2 fails with CODE while PATH exists
 *   xid CODE [PATH]          an Xid of the GPU, delivered once to an event set it is
 *                            registered with, once PATH exists when one is given
 *                            (fail figure: events, for nvmlDeviceRegisterEvents)
 *   cuda_version N           nvmlSystemGetCudaDriverVersion (default 13000); -1: the
 *                            function is missing (FUNCTION_NOT_FOUND)
 *   unprivileged             the caller lacks MIG monitoring privileges: a MIG-enabled
 *                            GPU answers NO_PERMISSION for its aggregate memory and
 *                            process lists (nvml.h: "In MIG mode ... only if the caller
 *                            has appropriate privileges"), and nvmlDeviceGetGpuInstanceById
 *                            ("Requires privileged user") too
 *   gpu                      starts a GPU (NVML index = order of appearance)
 *   mig SLOT                 starts a MIG device of the last GPU, at that slot index
 *   uuid TEXT | name TEXT (rest of line) | pci BUSID | minor N | mig_mode 0|1 | max_mig N
 *   gi N | ci N | util GPU_PCT MEM_PCT | memory TOTAL USED RESERVED (bytes)
 *   placement PROFILE_ID START SIZE
 *                            a MIG device's GPU instance: its profile ID and placement
 *                            (nvmlGpuInstanceGetInfo; the first slot of that GI says)
 *   power MILLIWATTS | energy MILLIJOULES | temperature CELSIUS | sm_clock MHZ
 *   clocks_event MASK        nvmlDeviceGetCurrentClocksEventReasons' bits (hex or decimal);
 *                            a driver before R535 ("5[0-2]*.*", "4*") has only the old
 *                            nvmlDeviceGetCurrentClocksThrottleReasons (the other answers
 *                            FUNCTION_NOT_FOUND)
 *                            Likewise nvmlDeviceGetTemperatureV is new in R565 and
 *                            nvmlDeviceGetMemoryInfo_v2 in R510: an older driver answers
 *                            FUNCTION_NOT_FOUND for them (counted as "temperature_v" and
 *                            "memory_v2", then as "temperature" and "memory")
 *   ecc CORRECTED UNCORRECTED (volatile; the aggregate counter answers 10x+7)
 *   replays N                nvmlDeviceGetPcieReplayCounter (default 0); a MIG device
 *                            answers NOT_SUPPORTED (a guess: nvml.h says nothing of MIG)
 *   video ENCODER_PCT DECODER_PCT
 *                            nvmlDeviceGetEncoderUtilization and ...DecoderUtilization
 *                            (default 0 0; a 167 ms sampling period); a MIG-enabled GPU
 *                            and a MIG device answer NOT_SUPPORTED (nvml.h: "not currently
 *                            supported" on MIG-enabled GPUs)
 *   memory_temperature CELSIUS
 *                            NVML_FI_DEV_MEMORY_TEMP through nvmlDeviceGetFieldValues
 *                            (an unsigned int); without it that field answers
 *                            NOT_SUPPORTED, as a GPU without HBM does, and so does every
 *                            other field ID. The call is counted as "fields" (and the
 *                            field asked as "memory_temp"); "fail
 *                            fields CODE" fails the whole call, "fail memory_temp CODE"
 *                            only the field's own nvmlReturn
 *   recovery_action N        NVML_FI_DEV_GET_GPU_RECOVERY_ACTION (230, an unsigned int):
 *                            the recovery the driver asks for the GPU; without it that
 *                            field answers NOT_SUPPORTED, and so does a MIG device; "fail
 *                            recovery_action CODE": the field's own nvmlReturn. Each time
 *                            the field is asked counts as "recovery_action"
 *   nvlinks N [uncounted]    the GPU has N NVLinks (default 0: none). nvmlDeviceGetNvLinkState
 *                            answers NVML_FEATURE_ENABLED for each but those of
 *                            nvlink_down, INVALID_ARGUMENT past N, NOT_SUPPORTED for a GPU
 *                            without NVLinks or a MIG device, and every link disabled on a
 *                            MIG-enabled GPU (the NVML bug DCGM works around: 200682374).
 *                            Field NVML_FI_DEV_NVLINK_LINK_COUNT (91, an unsigned int)
 *                            answers N; "uncounted": NOT_SUPPORTED, as a driver that does
 *                            not know the field. Counted as "nvlink_state" and "fields".
 *                            Field 91 and the error totals answer a scopeId past the
 *                            GPU's links INVALID_ARGUMENT (nvml.h has the totals' scopeId
 *                            a link ID, UINT_MAX only for the throughput; DCGM asks 0).
 *                            "fail nvlink_fields CODE": each NVLink field the GPU answers
 *                            has CODE as its own nvmlReturn (the call itself succeeds)
 *   field_as FIELD_ID TYPE VALUE
 *                            that field, where it answers SUCCESS, answers VALUE with
 *                            valueType TYPE (nvml.h's nvmlValueType_t: 0 double, "nan" and
 *                            "inf" too; 1 unsigned int ... 6 unsigned short; a number past
 *                            those: the value as an unsigned long long), as a driver whose
 *                            type or value differs from the one this fake gives (up to 4)
 *   nvlink_count C           field 91 answers C, not N: a driver counting other links than
 *                            it answers the state of (0: none, yet the links answer)
 *   nvlink_down LINK         that link is inactive (one line per link)
 *   nvlink_absent LINK       that link answers INVALID_ARGUMENT though below N (one line
 *                            per link): links numbered with gaps
 *   nvlink_error LINK CODE   that link's state answers CODE (up to 4 lines)
 *   nvlink_errors CRC_FLIT CRC_DATA REPLAY RECOVERY ECC_DATA
 *                            the *_ERROR_COUNT_TOTAL fields (38, 45, 52, 59, 160; unsigned
 *                            long long); -1: that field answers NOT_SUPPORTED; without the
 *                            line all five do
 *   arch N                   nvmlDeviceGetArchitecture answers N (nvml.h's
 *                            nvmlDeviceArchitecture_t; default 9, Hopper); "arch missing":
 *                            a driver without the call (FUNCTION_NOT_FOUND). Counted as
 *                            "architecture"
 *   nvlink5_errors MALFORMED OVERRUN RX RX_REMOTE RX_GENERAL INTEGRITY TX_DISCARD
 *                  RECOVERY RECOVERY_FAILED EFFECTIVE SYMBOL
 *                            NVLink 5's NVML_FI_DEV_NVLINK_COUNT_* fields (206-212, 215,
 *                            214, 219, 221; unsigned long long), answered by a GPU whose
 *                            arch is Blackwell (10) or later only, NOT_SUPPORTED by
 *                            others, as NVML does: at scopeId UINT_MAX the total given
 *                            here, at a link's scopeId that total over the link count
 *                            (a test can tell which was asked), past the links
 *                            INVALID_ARGUMENT; -1 or without the line NOT_SUPPORTED. The
 *                            older totals (nvlink_errors) answer there too, if given
 *   nvlink5_per_link         NVLink 5's counters answer INVALID_ARGUMENT at UINT_MAX, as
 *                            a driver keeping nvml.h's word (a link ID as the scope) would
 *   nvlink_traffic TX_KIB RX_KIB
 *                            NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX and _RX (138, 139) at
 *                            scopeId UINT_MAX (all links; another scope answers
 *                            INVALID_ARGUMENT here); -1 or without the line NOT_SUPPORTED,
 *                            -2 UNKNOWN (that field alone)
 *   fabric STATE STATUS [v1] nvmlDeviceGetGpuFabricInfoV (the v2 struct) and the older
 *                            nvmlDeviceGetGpuFabricInfo answer this state (nvml.h's
 *                            NVML_GPU_FABRIC_STATE_*) and status; "v1": a driver before
 *                            R550, without the V call (FUNCTION_NOT_FOUND). Without the
 *                            line, state NOT_SUPPORTED (no fabric); a MIG device answers
 *                            NOT_SUPPORTED. Counted as "fabric"
 *   fabric_health MASK       the V call's healthMask (nvml.h's
 *                            NVML_GPU_FABRIC_HEALTH_MASK_* fields; default 0: none
 *                            reported); the older call has no such field
 *   remap CORRECTABLE UNCORRECTABLE PENDING FAILURE
 *                            nvmlDeviceGetRemappedRows (default 0 0 0 0); a GPU with
 *                            MIG mode on answers NOT_SUPPORTED, as nvml.h says of one
 *                            with active instances
 *   retired SBE_PAGES DBE_PAGES PENDING
 *                            page retirement (GPUs before Ampere): pages retired for
 *                            multiple single-bit and for double-bit ECC errors, and the
 *                            pending status; without it NOT_SUPPORTED, as on later GPUs
 *   gpm GR SM OCC TENSOR DRAM FP64 FP32 FP16
 *                            the device (GPU or MIG) supports GPM (nvmlGpmQueryDeviceSupport,
 *                            counted as "gpm_support"), and nvmlGpmMetricsGet answers these
 *                            percentages for metrics 1, 2, 3, 5, 10, 11, 12, 13 between two
 *                            of its samples (nvmlGpmSampleGet, counted as "gpm_sample";
 *                            the metrics call as "gpm_metrics", and failed with "fail
 *                            gpm_metrics CODE" on the newer sample's device): -1 that
 *                            metric's own nvmlReturn NOT_SUPPORTED, -2 UNKNOWN, -N for N
 *                            of 3 or more nvmlReturn N (-10 TIMEOUT), nan a NaN;
 *                            any other metric NOT_SUPPORTED. Samples of two devices, or the
 *                            newer first, answer INVALID_ARGUMENT. Without the line the
 *                            device does not support GPM and its samples answer
 *                            NOT_SUPPORTED. fakeNvmlGpmSamplesLive: samples allocated and
 *                            not yet freed
 *                            A MIG device's GPU instance is sampled through its GPU
 *                            (nvmlGpmMigSampleGet, counted as "gpm_mig_sample" on the GPU):
 *                            its metrics are the instance's first MIG device's values (its
 *                            gpm line; without one NOT_SUPPORTED; an instance ID no MIG
 *                            device has: NOT_FOUND); "gpm_mig_missing" at the top: a driver
 *                            without the call (FUNCTION_NOT_FOUND)
 *   gpm_pcie TX_MIB_S RX_MIB_S
 *                            metrics 20 and 21 (PCIe traffic from and to the GPU, MiB/s)
 *                            answer these, as the gpm line's values (-1 NOT_SUPPORTED...);
 *                            without the line NOT_SUPPORTED
 *   virtualization MODE      nvmlDeviceGetVirtualizationMode answers MODE (nvml.h's
 *                            NVML_GPU_VIRTUALIZATION_MODE_*, default 0: bare metal; 2 a
 *                            vGPU guest); -1: NOT_SUPPORTED. Counted as "virtualization"
 *   gpm_missing              a driver before GPM (R520): nvmlGpmQueryDeviceSupport answers
 *                            FUNCTION_NOT_FOUND
 *   fail FIGURE CODE [PATH]  (while PATH exists, when one is given)
 *                            FIGURE: handle uuid name pci minor mig_mode util memory
 *                            power energy temperature clock clocks_event ecc remap retired
 *                            replays fields memory_temp encoder decoder
 *                            nvlink_state nvlink_fields fabric architecture
 *                            recovery_action gpm_support gpm_sample gpm_metrics
 *                            virtualization gi ci;
 *                            on a MIG device also mig_handle (its slot's
 *                            nvmlDeviceGetMigDeviceHandleByIndex);
 *                            on a GPU also
 *                            gi_by_id (nvmlDeviceGetGpuInstanceById: 4 is NO_PERMISSION)
 *   lost_flag PATH           the GPU (and its MIG devices) is lost while PATH exists
 *   mig_off_flag PATH        the GPU's MIG mode reads off while PATH exists (as after
 *                            nvidia-smi -mig 0 and a reset), on otherwise
 *   lost_at FIGURE [N]       the GPU (and its MIG devices) is lost from the Nth call
 *                            (default 1) of FIGURE naming it or one of its MIG devices
 *                            (FIGURE as for fail), whatever was called before
 *   mig_pending 0|1          the GPU's pending MIG mode (nvmlDeviceGetMigMode's second
 *                            answer, in effect after the next GPU reset); default: the
 *                            current one
 *   present_flag PATH        a MIG device exists only while PATH exists
 *   gone_flag PATH           a MIG device exists only while PATH does not exist
 *   count_error CODE         nvmlDeviceGetCount fails with CODE
 *   samples_none_success     nvmlDeviceGetProcessUtilization answers SUCCESS with a count
 *                            of 0 when it holds no sample newer than asked (rather than
 *                            NOT_FOUND), as some drivers answer the size query
 *   proc compute|graphics|mps PID MEMORY|na [PATH]
 *                            a running process of the device (GPU or MIG) with its used
 *                            memory (na: NVML_VALUE_NOT_AVAILABLE), listed while PATH
 *                            exists when one is given
 *   sample PID TIMESTAMP_US SM_PCT [PATH]
 *                            a process utilization sample of the device, held while
 *                            PATH exists when one is given
 *   (fail figures also: procs (both lists), procs_v3 (v3 lists only), proc_util)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_UNKNOWN = 999,
};

/* pynvml: nvmlPciInfo_t (the _v3 layout). */
typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

/* pynvml: c_nvmlMemory_t */
typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

/* pynvml: c_nvmlMemory_v2_t, version nvmlMemory_v2 */
typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_MEMORY_V2 0x02000028u

/* pynvml: c_nvmlUtilization_t */
typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

/* pynvml: c_nvmlTemperature_v1_t, version nvmlTemperature_v1 */
typedef struct {
    unsigned int version;
    unsigned int sensorType;
    int temperature;
} nvmlTemperature_v1_t;
#define NVML_TEMPERATURE_V1 0x0100000Cu

/* pynvml: c_nvmlProcessInfo_v2_t (its v3 has the same layout) */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlProcessInfo_t;

/* nvml.h of CUDA 12.2 (R535): nvmlProcessInfo_v3_t, what the R535 _v3 lists fill. CUDA
 * 12.3 (R545) gave _v3 the 24-byte layout back and moved this field to
 * nvmlProcessDetail_v1_t (nvmlDeviceGetRunningProcessDetailList). */
typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
    unsigned long long usedGpuCcProtectedMemory;
} nvmlProcessInfo_r535_v3_t;

/* pynvml: c_nvmlProcessUtilizationSample_t */
typedef struct {
    unsigned int pid;
    unsigned long long timeStamp;
    unsigned int smUtil;
    unsigned int memUtil;
    unsigned int encUtil;
    unsigned int decUtil;
} nvmlProcessUtilizationSample_t;

/* nvml.h: nvmlGpuInstancePlacement_t, nvmlGpuInstanceInfo_t (pynvml: c_nvmlGpuInstanceInfo_t) */
typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlGpuInstancePlacement_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlGpuInstancePlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;

#define NVML_VALUE_NOT_AVAILABLE_ULL (~0ULL)

enum figure {
    F_HANDLE, F_UUID, F_NAME, F_PCI, F_MINOR, F_MIG_MODE, F_UTIL, F_MEMORY, F_POWER,
    F_ENERGY, F_TEMPERATURE, F_CLOCK, F_ECC, F_GI, F_CI, F_PROCS, F_PROCS_V3, F_PROC_UTIL,
    F_GI_BY_ID, F_EVENTS, F_CLOCKS_EVENT, F_CLOCKS_EVENT_REASONS, F_REMAP,
    F_RETIRED, F_TEMPERATURE_V, F_MEMORY_V2, F_DRIVER_VERSION, F_REPLAYS,
    F_FIELDS, F_MEMORY_TEMP, F_ENCODER, F_DECODER, F_NVLINK_STATE, F_NVLINK_FIELDS,
    F_FABRIC, F_ARCHITECTURE, F_RECOVERY_ACTION, F_GPM_SUPPORT, F_GPM_SAMPLE, F_GPM_METRICS,
    F_VIRTUALIZATION, F_GPM_MIG_SAMPLE, F_MIG_HANDLE, F_COUNT
};
static const char *const figure_names[F_COUNT] = {
    "handle", "uuid", "name", "pci", "minor", "mig_mode", "util", "memory", "power",
    "energy", "temperature", "clock", "ecc", "gi", "ci", "procs", "procs_v3", "proc_util",
    "gi_by_id", "events", "clocks_event", "clocks_event_reasons",
    "remap", "retired", "temperature_v", "memory_v2", "driver_version", "replays",
    "fields", "memory_temp", "encoder", "decoder", "nvlink_state", "nvlink_fields",
    "fabric", "architecture", "recovery_action", "gpm_support", "gpm_sample", "gpm_metrics",
    "virtualization", "gpm_mig_sample", "mig_handle",
};

/* nvml.h's GPM structures; pynvml sizes the metrics array by its NVML_GPM_METRIC_MAX. */
#define PYNVML_GPM_METRIC_MAX 477
#define FAKE_GPM_METRICS 10
static const unsigned int gpm_metric_ids[FAKE_GPM_METRICS] = {1, 2, 3, 5, 10, 11, 12, 13, 20, 21};
typedef struct nvmlGpmSample_st {
    unsigned int magic;
    struct fake_dev *device;
    unsigned long long sequence; /* 0: never filled */
} *nvmlGpmSample_t;
#define GPM_SAMPLE_MAGIC 0x67706d31u
typedef struct {
    unsigned int metricId;
    nvmlReturn_t nvmlReturn;
    double value;
    struct {
        char *shortName;
        char *longName;
        char *unit;
    } metricInfo;
} nvmlGpmMetric_t;
typedef struct {
    unsigned int version;
    unsigned int numMetrics;
    nvmlGpmSample_t sample1;
    nvmlGpmSample_t sample2;
    nvmlGpmMetric_t metrics[PYNVML_GPM_METRIC_MAX];
} nvmlGpmMetricsGet_t;
typedef struct {
    unsigned int version;
    unsigned int isSupportedDevice;
} nvmlGpmSupport_t;

/* nvml.h: nvmlEventData_t (pynvml: c_nvmlEventData_t) */
typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

/* nvml.h: nvmlFieldValue_t (pynvml: c_nvmlFieldValue_t) */
typedef union {
    double dVal;
    unsigned int uiVal;
    unsigned long ulVal;
    unsigned long long ullVal;
    signed long long sllVal;
    signed int siVal;
    unsigned short usVal;
} nvmlValue_t;

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    unsigned int valueType; /* nvmlValueType_t */
    nvmlReturn_t nvmlReturn;
    nvmlValue_t value;
} nvmlFieldValue_t;

#define NVML_FI_DEV_MEMORY_TEMP 82
#define NVML_FI_DEV_NVLINK_LINK_COUNT 91
#define NVML_FI_DEV_GET_GPU_RECOVERY_ACTION 230
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX 138
#define NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX 139
#define NVML_VALUE_TYPE_UNSIGNED_INT 1
#define NVML_VALUE_TYPE_UNSIGNED_LONG_LONG 3
#define NVML_NVLINK_ERROR_FIELDS 5
/* nvml.h's *_ERROR_COUNT_TOTAL: CRC flit, CRC data, replay, recovery, ECC data */
static const unsigned int nvlink_error_fields[NVML_NVLINK_ERROR_FIELDS] = {38, 45, 52, 59, 160};
#define NVML_NVLINK5_ERROR_FIELDS 11
/* nvml.h's NVML_FI_DEV_NVLINK_COUNT_*: malformed packet, buffer overrun, Rx, Rx remote,
 * Rx general, local link integrity errors, Tx discards, link recovery events, link
 * recovery failed events, effective errors, symbol errors */
static const unsigned int nvlink5_error_fields[NVML_NVLINK5_ERROR_FIELDS] = {
    206, 207, 208, 209, 210, 211, 212, 215, 214, 219, 221};
#define NVML_DEVICE_ARCH_HOPPER 9
#define NVML_DEVICE_ARCH_BLACKWELL 10
#define NVML_DEVICE_ARCH_UNKNOWN 0xffffffffu
#define NVML_FEATURE_DISABLED 0
#define NVML_FEATURE_ENABLED 1

/* nvml.h's nvmlGpuFabricInfo_t and nvmlGpuFabricInfo_v2_t; the state is one byte. */
typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state;
    unsigned int healthMask;
} nvmlGpuFabricInfo_v2_t;

#define NVML_GPU_FABRIC_INFO_V2 (unsigned int)(sizeof(nvmlGpuFabricInfo_v2_t) | (2 << 24U))


typedef struct fake_event_set {
    int live;
    int broken; /* a registration with it failed UNKNOWN: nvml.h's "undefined state" */
} *nvmlEventSet_t;

#define NVML_EVENT_TYPE_XID_CRITICAL_ERROR 0x8ULL

#define MAX_XIDS 8

typedef struct {
    unsigned long long code;
    char flag[256]; /* raised once this file exists; "" at once */
    int delivered;
} fake_xid;

#define MAX_PROCS 16

typedef struct {
    int kind; /* 0: compute, 1: graphics, 2: MPS client */
    unsigned int pid;
    unsigned long long memory;
    char alive_flag[256]; /* listed while this file exists; "" always */
} fake_proc;

typedef struct {
    unsigned int pid;
    unsigned long long timestamp;
    unsigned int sm;
    char present_flag[256]; /* held by NVML while this file exists; "" always */
} fake_sample;

/* True while a fixture's flag file (or no flag) says the entry exists. */
static int flagged(const char *flag) { return flag[0] == '\0' || access(flag, F_OK) == 0; }

#define MAX_GPUS 16
#define MAX_MIGS 8
#define TEXT 128

typedef struct fake_dev {
    int present;
    struct fake_dev *parent; /* NULL for a GPU */
    char uuid[TEXT];
    char name[TEXT];
    char pci[TEXT];
    unsigned int minor, mig_mode, max_mig, gi, ci;
    int mig_pending; /* -1: as the current mode */
    char present_flag[256]; /* a MIG device exists only while this file exists; "" always */
    char gone_flag[256];    /* ... only while this file does not exist; "" always */
    unsigned int gi_profile, placement_start, placement_size;
    unsigned int util_gpu, util_mem;
    unsigned int encoder_pct, decoder_pct;
    unsigned long long mem_total, mem_used, mem_reserved;
    unsigned int power_mw;
    unsigned long long energy_mj;
    unsigned int temperature, sm_clock;
    unsigned long long clocks_event;
    unsigned long long ecc_corrected, ecc_uncorrected;
    unsigned int remap_correctable, remap_uncorrectable, remap_pending, remap_failure;
    int retired_known; /* a "retired" line was given: the GPU retires pages */
    unsigned int retired_sbe, retired_dbe, retired_pending;
    unsigned int pcie_replays;
    int memory_temperature_known; /* a "memory_temperature" line was given */
    long long recovery_action;    /* -1: NOT_SUPPORTED */
    unsigned int memory_temperature;
    unsigned int nvlinks;
    int nvlinks_uncounted;              /* field 91 answers NOT_SUPPORTED */
    long long nvlink_count;             /* field 91's answer; -1: nvlinks */
    unsigned long long nvlinks_down;    /* a bit per inactive link */
    unsigned long long nvlinks_absent;  /* a bit per link that answers INVALID_ARGUMENT */
    unsigned int nvlink_error_links[4]; /* nvlink_error: these links answer ... */
    int nvlink_error_codes[4];          /* ... these codes */
    unsigned int nvlink_error_count;
    unsigned int field_as_ids[4];       /* field_as: these fields answer ... */
    unsigned int field_as_types[4];     /* ... this valueType ... */
    nvmlValue_t field_as_values[4];     /* ... and value */
    unsigned int field_as_count;
    long long nvlink_errors[NVML_NVLINK_ERROR_FIELDS]; /* -1: NOT_SUPPORTED */
    long long nvlink5_errors[NVML_NVLINK5_ERROR_FIELDS]; /* -1: NOT_SUPPORTED */
    long long nvlink_tx_kib, nvlink_rx_kib; /* -1: NOT_SUPPORTED */
    unsigned int arch;
    int arch_missing; /* no nvmlDeviceGetArchitecture: FUNCTION_NOT_FOUND */
    int nvlink5_per_link; /* NVLink 5's counters refuse scope UINT_MAX */
    unsigned int fabric_state;
    int fabric_status;
    int fabric_v1_only; /* no nvmlDeviceGetGpuFabricInfoV: FUNCTION_NOT_FOUND */
    unsigned int fabric_health; /* the V call's healthMask */
    int virtualization; /* nvmlDeviceGetVirtualizationMode's answer; -1: NOT_SUPPORTED */
    int gpm_known; /* a "gpm" line was given: the device supports GPM */
    double gpm[10]; /* values of gpm_metric_ids; -1 NOT_SUPPORTED, -2 UNKNOWN, -N N */
    int fail[F_COUNT];
    char fail_flag[F_COUNT][256]; /* fail only while this file exists; "" always */
    char lost_flag[512];
    char mig_off_flag[512];
    int lost_at;        /* a figure; -1: never */
    long lost_at_call;  /* ... from this call of it on */
    long lost_at_seen;  /* calls of it so far */
    int lost;           /* lost_at reached: lost for good */
    fake_proc procs[MAX_PROCS];
    unsigned int proc_count;
    fake_sample samples[MAX_PROCS];
    unsigned int sample_count;
    fake_xid xids[MAX_XIDS];
    unsigned int xid_count;
    unsigned long long registered_events; /* the event types of nvmlDeviceRegisterEvents */
    nvmlEventSet_t registered_set;        /* ... with this set (one at a time here) */
} fake_dev;

static fake_dev gpus[MAX_GPUS];
static fake_dev migs[MAX_GPUS][MAX_MIGS];
/* GPU instance handles: the MIG device of the GI's first slot, where one was asked for. */
static fake_dev *gpu_instances[MAX_GPUS][MAX_MIGS];
static unsigned int gpu_count;
static int init_count;
#define DEFAULT_DRIVER_VERSION "580.82.07"
#define DEFAULT_CUDA_VERSION 13000 /* the CUDA 13.0 that R580 supports */
static char driver_version[TEXT] = DEFAULT_DRIVER_VERSION;
static int cuda_version = DEFAULT_CUDA_VERSION;
static int event_set_error; /* nvmlEventSetCreate fails with it (while the flag exists) */
static char event_set_flag[256];
static int cuda_error; /* nvmlSystemGetCudaDriverVersion fails with it while the flag exists */
static char cuda_error_flag[256];
static int event_wait_error; /* nvmlEventSetWait_v2 fails with it while the flag exists */
static char event_wait_flag[256];
static struct fake_event_set event_sets[4];
static long last_wait_ms = -1; /* the timeout of the last nvmlEventSetWait_v2 (test hook) */
static int unprivileged;
static int count_error; /* nvmlDeviceGetCount fails with it */
static int samples_none_success; /* no sample: SUCCESS and 0, not NOT_FOUND */
static int gpm_missing; /* nvmlGpmQueryDeviceSupport answers FUNCTION_NOT_FOUND */
static int gpm_mig_missing; /* nvmlGpmMigSampleGet answers FUNCTION_NOT_FOUND */
static long gpm_samples_live; /* allocated, not yet freed (fakeNvmlGpmSamplesLive) */
static unsigned long long gpm_sequence; /* the last sample taken */

static void reset_device(fake_dev *d, fake_dev *parent) {
    memset(d, 0, sizeof *d);
    d->present = 1;
    d->parent = parent;
    d->lost_at = -1;
    d->mig_pending = -1;
    for (int i = 0; i < NVML_NVLINK_ERROR_FIELDS; i++) d->nvlink_errors[i] = -1;
    for (int i = 0; i < NVML_NVLINK5_ERROR_FIELDS; i++) d->nvlink5_errors[i] = -1;
    d->arch = NVML_DEVICE_ARCH_HOPPER;
    d->recovery_action = -1;
    d->nvlink_tx_kib = d->nvlink_rx_kib = -1;
    d->nvlink_count = -1;
    d->gpm[8] = d->gpm[9] = -1; /* PCIe traffic: NOT_SUPPORTED without a gpm_pcie line */
}

static int parse_figure(const char *text) {
    for (int i = 0; i < F_COUNT; i++) {
        if (strcmp(text, figure_names[i]) == 0) return i;
    }
    return -1;
}

static void copy_text(char *dest, const char *src) {
    snprintf(dest, TEXT, "%s", src);
}

/* Reads the config; returns NVML_SUCCESS or the error nvmlInit must answer. */
static nvmlReturn_t load_config(void) {
    const char *path = getenv("FAKE_NVML_CONFIG");
    if (path == NULL || path[0] == '\0') return NVML_ERROR_DRIVER_NOT_LOADED;
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        fprintf(stderr, "fake_nvml: cannot open %s\n", path);
        return NVML_ERROR_UNKNOWN;
    }
    memset(gpus, 0, sizeof gpus);
    memset(migs, 0, sizeof migs);
    memset(gpu_instances, 0, sizeof gpu_instances);
    gpu_count = 0;
    copy_text(driver_version, DEFAULT_DRIVER_VERSION);
    cuda_version = DEFAULT_CUDA_VERSION;
    event_set_error = 0;
    event_set_flag[0] = '\0';
    cuda_error = 0;
    cuda_error_flag[0] = '\0';
    event_wait_error = 0;
    event_wait_flag[0] = '\0';
    unprivileged = 0;
    count_error = 0;
    samples_none_success = 0;
    gpm_missing = 0;
    gpm_mig_missing = 0;
    nvmlReturn_t result = NVML_SUCCESS;
    fake_dev *current = NULL;
    char line[1024];
    int number = 0;
    while (fgets(line, sizeof line, file) != NULL) {
        number++;
        line[strcspn(line, "\r\n#")] = '\0';
        char key[64] = "";
        int consumed = 0;
        if (sscanf(line, " %63s %n", key, &consumed) < 1) continue;
        const char *rest = line + consumed;
        int ok = 1;
        if (strcmp(key, "init_error") == 0) {
            ok = sscanf(rest, "%d", &result) == 1;
        } else if (strcmp(key, "unprivileged") == 0) {
            unprivileged = 1;
        } else if (strcmp(key, "event_set_error") == 0) {
            ok = sscanf(rest, "%d %255s", &event_set_error, event_set_flag) >= 1;
        } else if (strcmp(key, "cuda_error") == 0) {
            ok = sscanf(rest, "%d %255s", &cuda_error, cuda_error_flag) == 2;
        } else if (strcmp(key, "event_wait_error") == 0) {
            ok = sscanf(rest, "%d %255s", &event_wait_error, event_wait_flag) == 2;
        } else if (strcmp(key, "samples_none_success") == 0) {
            samples_none_success = 1;
        } else if (strcmp(key, "gpm_missing") == 0) {
            gpm_missing = 1;
        } else if (strcmp(key, "gpm_mig_missing") == 0) {
            gpm_mig_missing = 1;
        } else if (strcmp(key, "count_error") == 0) {
            ok = sscanf(rest, "%d", &count_error) == 1;
        } else if (strcmp(key, "cuda_version") == 0) {
            ok = sscanf(rest, "%d", &cuda_version) == 1;
        } else if (strcmp(key, "driver_version") == 0) {
            ok = rest[0] != '\0';
            copy_text(driver_version, rest);
        } else if (strcmp(key, "gpu") == 0) {
            ok = gpu_count < MAX_GPUS;
            if (ok) {
                current = &gpus[gpu_count++];
                reset_device(current, NULL);
            }
        } else if (strcmp(key, "mig") == 0) {
            unsigned int slot = 0;
            ok = gpu_count > 0 && sscanf(rest, "%u", &slot) == 1 && slot < MAX_MIGS;
            if (ok) {
                current = &migs[gpu_count - 1][slot];
                reset_device(current, &gpus[gpu_count - 1]);
            }
        } else if (current == NULL) {
            ok = 0;
        } else if (strcmp(key, "uuid") == 0) {
            copy_text(current->uuid, rest);
        } else if (strcmp(key, "name") == 0) {
            copy_text(current->name, rest);
        } else if (strcmp(key, "pci") == 0) {
            copy_text(current->pci, rest);
        } else if (strcmp(key, "minor") == 0) {
            ok = sscanf(rest, "%u", &current->minor) == 1;
        } else if (strcmp(key, "mig_mode") == 0) {
            ok = sscanf(rest, "%u", &current->mig_mode) == 1;
        } else if (strcmp(key, "max_mig") == 0) {
            ok = sscanf(rest, "%u", &current->max_mig) == 1 && current->max_mig <= MAX_MIGS;
        } else if (strcmp(key, "gi") == 0) {
            ok = sscanf(rest, "%u", &current->gi) == 1;
        } else if (strcmp(key, "ci") == 0) {
            ok = sscanf(rest, "%u", &current->ci) == 1;
        } else if (strcmp(key, "placement") == 0) {
            ok = sscanf(rest, "%u %u %u", &current->gi_profile, &current->placement_start,
                        &current->placement_size) == 3;
        } else if (strcmp(key, "util") == 0) {
            ok = sscanf(rest, "%u %u", &current->util_gpu, &current->util_mem) == 2;
        } else if (strcmp(key, "memory") == 0) {
            ok = sscanf(rest, "%llu %llu %llu", &current->mem_total, &current->mem_used,
                        &current->mem_reserved) == 3;
        } else if (strcmp(key, "power") == 0) {
            ok = sscanf(rest, "%u", &current->power_mw) == 1;
        } else if (strcmp(key, "energy") == 0) {
            ok = sscanf(rest, "%llu", &current->energy_mj) == 1;
        } else if (strcmp(key, "temperature") == 0) {
            ok = sscanf(rest, "%u", &current->temperature) == 1;
        } else if (strcmp(key, "sm_clock") == 0) {
            ok = sscanf(rest, "%u", &current->sm_clock) == 1;
        } else if (strcmp(key, "clocks_event") == 0) {
            ok = sscanf(rest, "%lli", &current->clocks_event) == 1;
        } else if (strcmp(key, "remap") == 0) {
            ok = sscanf(rest, "%u %u %u %u", &current->remap_correctable,
                        &current->remap_uncorrectable, &current->remap_pending,
                        &current->remap_failure) == 4;
        } else if (strcmp(key, "retired") == 0) {
            ok = sscanf(rest, "%u %u %u", &current->retired_sbe, &current->retired_dbe,
                        &current->retired_pending) == 3;
            current->retired_known = ok;
        } else if (strcmp(key, "video") == 0) {
            ok = sscanf(rest, "%u %u", &current->encoder_pct, &current->decoder_pct) == 2;
        } else if (strcmp(key, "memory_temperature") == 0) {
            ok = sscanf(rest, "%u", &current->memory_temperature) == 1;
            current->memory_temperature_known = ok;
        } else if (strcmp(key, "replays") == 0) {
            ok = sscanf(rest, "%u", &current->pcie_replays) == 1;
        } else if (strcmp(key, "nvlinks") == 0) {
            char mode[16] = "";
            int n = sscanf(rest, "%u %15s", &current->nvlinks, mode);
            ok = n == 1 || (n == 2 && strcmp(mode, "uncounted") == 0);
            current->nvlinks_uncounted = n == 2;
        } else if (strcmp(key, "field_as") == 0) {
            unsigned int n = current->field_as_count, type = 0;
            char text[64] = "";
            ok = n < 4 && sscanf(rest, "%u %u %63s", &current->field_as_ids[n], &type, text) == 3;
            nvmlValue_t *value = &current->field_as_values[n];
            memset(value, 0, sizeof *value);
            switch (type) {
            case 0: value->dVal = strtod(text, NULL); break;
            case 1: value->uiVal = (unsigned int)strtoull(text, NULL, 0); break;
            case 2: value->ulVal = strtoul(text, NULL, 0); break;
            case 4: value->sllVal = strtoll(text, NULL, 0); break;
            case 5: value->siVal = (int)strtol(text, NULL, 0); break;
            case 6: value->usVal = (unsigned short)strtoul(text, NULL, 0); break;
            default: value->ullVal = strtoull(text, NULL, 0); break;
            }
            current->field_as_types[n] = type;
            if (ok) current->field_as_count++;
        } else if (strcmp(key, "nvlink_count") == 0) {
            ok = sscanf(rest, "%lld", &current->nvlink_count) == 1 && current->nvlink_count >= 0;
        } else if (strcmp(key, "nvlink_down") == 0) {
            unsigned int link = 0;
            ok = sscanf(rest, "%u", &link) == 1 && link < 64;
            if (ok) current->nvlinks_down |= 1ULL << link;
        } else if (strcmp(key, "nvlink_absent") == 0) {
            unsigned int link = 0;
            ok = sscanf(rest, "%u", &link) == 1 && link < 64;
            if (ok) current->nvlinks_absent |= 1ULL << link;
        } else if (strcmp(key, "nvlink_error") == 0) {
            unsigned int n = current->nvlink_error_count;
            ok = n < 4 && sscanf(rest, "%u %d", &current->nvlink_error_links[n],
                                 &current->nvlink_error_codes[n]) == 2;
            if (ok) current->nvlink_error_count++;
        } else if (strcmp(key, "nvlink_errors") == 0) {
            long long *e = current->nvlink_errors;
            ok = sscanf(rest, "%lld %lld %lld %lld %lld", &e[0], &e[1], &e[2], &e[3], &e[4]) == 5;
        } else if (strcmp(key, "gpm_pcie") == 0) {
            ok = sscanf(rest, "%lf %lf", &current->gpm[8], &current->gpm[9]) == 2;
        } else if (strcmp(key, "virtualization") == 0) {
            ok = sscanf(rest, "%d", &current->virtualization) == 1;
        } else if (strcmp(key, "gpm") == 0) {
            double *g = current->gpm;
            ok = sscanf(rest, "%lf %lf %lf %lf %lf %lf %lf %lf", &g[0], &g[1], &g[2], &g[3],
                        &g[4], &g[5], &g[6], &g[7]) == 8;
            current->gpm_known = ok;
        } else if (strcmp(key, "recovery_action") == 0) {
            ok = sscanf(rest, "%lld", &current->recovery_action) == 1;
        } else if (strcmp(key, "nvlink5_errors") == 0) {
            long long *e = current->nvlink5_errors;
            ok = sscanf(rest, "%lld %lld %lld %lld %lld %lld %lld %lld %lld %lld %lld", &e[0],
                        &e[1], &e[2], &e[3], &e[4], &e[5], &e[6], &e[7], &e[8], &e[9],
                        &e[10]) == NVML_NVLINK5_ERROR_FIELDS;
        } else if (strcmp(key, "nvlink5_per_link") == 0) {
            current->nvlink5_per_link = 1;
        } else if (strcmp(key, "arch") == 0) {
            char word[16] = "";
            ok = sscanf(rest, "%15s", word) == 1;
            current->arch_missing = ok && strcmp(word, "missing") == 0;
            if (ok && !current->arch_missing) ok = sscanf(word, "%u", &current->arch) == 1;
        } else if (strcmp(key, "fabric") == 0) {
            char mode[8] = "";
            int n = sscanf(rest, "%u %d %7s", &current->fabric_state, &current->fabric_status,
                           mode);
            ok = n == 2 || (n == 3 && strcmp(mode, "v1") == 0);
            current->fabric_v1_only = n == 3;
        } else if (strcmp(key, "fabric_health") == 0) {
            ok = sscanf(rest, "%i", (int *)&current->fabric_health) == 1;
        } else if (strcmp(key, "nvlink_traffic") == 0) {
            ok = sscanf(rest, "%lld %lld", &current->nvlink_tx_kib, &current->nvlink_rx_kib) == 2;
        } else if (strcmp(key, "ecc") == 0) {
            ok = sscanf(rest, "%llu %llu", &current->ecc_corrected,
                        &current->ecc_uncorrected) == 2;
        } else if (strcmp(key, "fail") == 0) {
            char name[64] = "";
            int code = 0;
            char flag[256] = "";
            ok = sscanf(rest, "%63s %d %255s", name, &code, flag) >= 2;
            int figure = ok ? parse_figure(name) : -1;
            ok = figure >= 0;
            if (ok) {
                current->fail[figure] = code;
                snprintf(current->fail_flag[figure], sizeof current->fail_flag[figure], "%s",
                         flag);
            }
        } else if (strcmp(key, "lost_flag") == 0) {
            snprintf(current->lost_flag, sizeof current->lost_flag, "%s", rest);
        } else if (strcmp(key, "mig_off_flag") == 0) {
            snprintf(current->mig_off_flag, sizeof current->mig_off_flag, "%s", rest);
        } else if (strcmp(key, "proc") == 0) {
            ok = current->proc_count < MAX_PROCS;
            if (ok) {
                char type[16] = "", memory[32] = "";
                fake_proc *proc = &current->procs[current->proc_count];
                proc->alive_flag[0] = '\0';
                int fields = sscanf(rest, "%15s %u %31s %255s", type, &proc->pid, memory,
                                    proc->alive_flag);
                ok = fields >= 3;
                proc->kind = strcmp(type, "graphics") == 0 ? 1 : strcmp(type, "mps") == 0 ? 2 : 0;
                proc->memory = strcmp(memory, "na") == 0 ? NVML_VALUE_NOT_AVAILABLE_ULL
                                                         : strtoull(memory, NULL, 10);
                if (fields == 3) proc->alive_flag[0] = '\0';
                if (ok) current->proc_count++;
            }
        } else if (strcmp(key, "sample") == 0) {
            ok = current->sample_count < MAX_PROCS;
            if (ok) {
                fake_sample *sample = &current->samples[current->sample_count];
                sample->present_flag[0] = '\0';
                int fields = sscanf(rest, "%u %llu %u %255s", &sample->pid, &sample->timestamp,
                                    &sample->sm, sample->present_flag);
                ok = fields >= 3;
                if (fields == 3) sample->present_flag[0] = '\0';
                if (ok) current->sample_count++;
            }
        } else if (strcmp(key, "xid") == 0) {
            ok = current->xid_count < MAX_XIDS;
            if (ok) {
                fake_xid *xid = &current->xids[current->xid_count];
                xid->flag[0] = '\0';
                xid->delivered = 0;
                ok = sscanf(rest, "%llu %255s", &xid->code, xid->flag) >= 1;
                if (ok) current->xid_count++;
            }
        } else if (strcmp(key, "mig_pending") == 0) {
            ok = sscanf(rest, "%d", &current->mig_pending) == 1;
        } else if (strcmp(key, "present_flag") == 0) {
            ok = current->parent != NULL && sscanf(rest, "%255s", current->present_flag) == 1;
        } else if (strcmp(key, "gone_flag") == 0) {
            ok = current->parent != NULL && sscanf(rest, "%255s", current->gone_flag) == 1;
        } else if (strcmp(key, "lost_at") == 0) {
            char name[64] = "";
            long nth = 1;
            ok = sscanf(rest, "%63s %ld", name, &nth) >= 1 && nth >= 1;
            int figure = ok ? parse_figure(name) : -1;
            ok = figure >= 0;
            if (ok) {
                current->lost_at = figure;
                current->lost_at_call = nth;
            }
        } else {
            ok = 0;
        }
        if (!ok) {
            fprintf(stderr, "fake_nvml: %s:%d: cannot parse: %s\n", path, number, line);
            result = NVML_ERROR_UNKNOWN;
            break;
        }
    }
    fclose(file);
    return result;
}

static fake_dev *lookup(nvmlDevice_t handle) {
    fake_dev *d = (fake_dev *)handle;
    int is_gpu = d >= &gpus[0] && d < &gpus[gpu_count];
    int is_mig = d >= &migs[0][0] && d < &migs[MAX_GPUS - 1][MAX_MIGS];
    return (is_gpu || is_mig) && d->present ? d : NULL;
}

/* True while a MIG device's present/gone flags say it exists (a GPU always does). */
static int exists(const fake_dev *d) {
    if (!d->present) return 0;
    if (d->present_flag[0] != '\0' && access(d->present_flag, F_OK) != 0) return 0;
    if (d->gone_flag[0] != '\0' && access(d->gone_flag, F_OK) == 0) return 0;
    return 1;
}

/* True when the physical GPU is lost, counting this call of ``figure`` for lost_at. */
static int lost(fake_dev *d, enum figure figure) {
    fake_dev *gpu = d->parent != NULL ? d->parent : d;
    if ((int)figure == gpu->lost_at && ++gpu->lost_at_seen >= gpu->lost_at_call) gpu->lost = 1;
    if (gpu->lost) return 1;
    return gpu->lost_flag[0] != '\0' && access(gpu->lost_flag, F_OK) == 0;
}

/* Per-device calls made, by figure, since the library loaded (fakeNvmlCalls). */
static long figure_calls[F_COUNT];

/* The common prologue of every per-device call. */
static nvmlReturn_t enter(nvmlDevice_t handle, enum figure figure, fake_dev **out) {
    figure_calls[figure]++;
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    fake_dev *d = lookup(handle);
    if (d == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (lost(d, figure)) return NVML_ERROR_GPU_IS_LOST;
    if (d->fail[figure] != 0 && flagged(d->fail_flag[figure])) return d->fail[figure];
    *out = d;
    return NVML_SUCCESS;
}

#define ENTER(handle, figure)                              \
    fake_dev *d = NULL;                                    \
    nvmlReturn_t entered = enter(handle, figure, &d);      \
    if (entered != NVML_SUCCESS) return entered

/* The GPU's current MIG mode. */
static int mig_on(const fake_dev *d) {
    if (d->mig_off_flag[0] != '\0' && access(d->mig_off_flag, F_OK) == 0) return 0;
    return d->mig_mode != 0;
}

/* True where NVML refuses a MIG-enabled GPU's aggregate figures to this caller. */
static int aggregate_denied(const fake_dev *d) {
    return unprivileged && d->parent == NULL && mig_on(d);
}

static nvmlReturn_t copy_string(char *dest, unsigned int length, const char *src) {
    if (dest == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(dest, src);
    return NVML_SUCCESS;
}

/* --- Library ------------------------------------------------------------------------ */

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    nvmlReturn_t result = load_config();
    if (result == NVML_SUCCESS) init_count++;
    return result;
}

nvmlReturn_t nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
nvmlReturn_t nvmlInit(void) { return nvmlInitWithFlags(0); }

nvmlReturn_t nvmlShutdown(void) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    init_count--;
    return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}

/* Counted as "driver_version" (not a device call; it cannot be made to fail). */
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    figure_calls[F_DRIVER_VERSION]++;
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    return copy_string(version, length, driver_version);
}

/* Not counted as a device call; works without nvmlInit, as NVML's does. */
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) {
    if (version == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (cuda_version < 0) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (cuda_error != 0 && flagged(cuda_error_flag)) return cuda_error;
    *version = cuda_version;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    return nvmlSystemGetCudaDriverVersion(version);
}

/* --- Events --------------------------------------------------------------------------- */

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (set == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (event_set_error != 0 && flagged(event_set_flag)) return event_set_error;
    for (unsigned int i = 0; i < sizeof event_sets / sizeof event_sets[0]; i++) {
        if (!event_sets[i].live) {
            event_sets[i].live = 1;
            event_sets[i].broken = 0;
            *set = &event_sets[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_UNKNOWN;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types,
                                      nvmlEventSet_t set) {
    if (set != NULL && set->broken) return NVML_ERROR_UNKNOWN;
    fake_dev *d = NULL;
    nvmlReturn_t entered = enter(device, F_EVENTS, &d);
    if (entered == NVML_ERROR_UNKNOWN && set != NULL) set->broken = 1;
    if (entered != NVML_SUCCESS) return entered;
    if (set == NULL || !set->live || d->parent != NULL) return NVML_ERROR_INVALID_ARGUMENT;
    d->registered_events |= types;
    d->registered_set = set;
    return NVML_SUCCESS;
}

/* The next Xid of a registered GPU whose flag file exists, once each; never waits. */
nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                 unsigned int timeoutms) {
    last_wait_ms = (long)timeoutms;
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (set == NULL || !set->live || data == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (set->broken) return NVML_ERROR_UNKNOWN;
    if (event_wait_error != 0 && flagged(event_wait_flag)) return event_wait_error;
    for (unsigned int g = 0; g < gpu_count; g++) {
        fake_dev *gpu = &gpus[g];
        if (gpu->registered_set != set) continue; /* events go to the sets registered */
        if (!(gpu->registered_events & NVML_EVENT_TYPE_XID_CRITICAL_ERROR)) continue;
        for (unsigned int i = 0; i < gpu->xid_count; i++) {
            fake_xid *xid = &gpu->xids[i];
            if (xid->delivered || !flagged(xid->flag)) continue;
            xid->delivered = 1;
            memset(data, 0, sizeof *data);
            data->device = (nvmlDevice_t)gpu;
            data->eventType = NVML_EVENT_TYPE_XID_CRITICAL_ERROR;
            data->eventData = xid->code;
            data->gpuInstanceId = 0xFFFFFFFFu; /* the whole GPU, as nvml.h says */
            data->computeInstanceId = 0xFFFFFFFFu;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_TIMEOUT;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set) {
    if (set == NULL || !set->live) return NVML_ERROR_INVALID_ARGUMENT;
    set->live = 0;
    for (unsigned int g = 0; g < gpu_count; g++) {
        if (gpus[g].registered_set == set) {
            gpus[g].registered_set = NULL;
            gpus[g].registered_events = 0;
        }
    }
    return NVML_SUCCESS;
}

/* --- Test hooks (not NVML) ------------------------------------------------------------ */

int fakeNvmlInitCount(void) { return init_count; }

/* The timeout nvmlEventSetWait_v2 was last called with, in ms; -1: never called. */
long fakeNvmlLastEventWaitMs(void) { return last_wait_ms; }

/* The event types GPU ``index`` is registered for (nvmlDeviceRegisterEvents' mask). */
unsigned long long fakeNvmlRegisteredEvents(unsigned int index) {
    return index < gpu_count ? gpus[index].registered_events : 0;
}

/* Calls made so far of the figure named as in the config's "fail" lines; -1: no such. */
long fakeNvmlCalls(const char *figure) {
    for (int f = 0; f < F_COUNT; f++) {
        if (strcmp(figure_names[f], figure) == 0) return figure_calls[f];
    }
    return -1;
}

long fakeNvmlGpmSamplesLive(void) { return gpm_samples_live; }

long fakeNvmlStructSize(const char *name) {
    if (strcmp(name, "c_nvmlGpmMetric_t") == 0) return sizeof(nvmlGpmMetric_t);
    if (strcmp(name, "c_nvmlGpmMetricsGet_t") == 0) return sizeof(nvmlGpmMetricsGet_t);
    if (strcmp(name, "c_nvmlGpmSupport_t") == 0) return sizeof(nvmlGpmSupport_t);
    if (strcmp(name, "nvmlPciInfo_t") == 0) return sizeof(nvmlPciInfo_t);
    if (strcmp(name, "c_nvmlMemory_t") == 0) return sizeof(nvmlMemory_t);
    if (strcmp(name, "c_nvmlMemory_v2_t") == 0) return sizeof(nvmlMemory_v2_t);
    if (strcmp(name, "c_nvmlUtilization_t") == 0) return sizeof(nvmlUtilization_t);
    if (strcmp(name, "c_nvmlTemperature_v1_t") == 0) return sizeof(nvmlTemperature_v1_t);
    if (strcmp(name, "c_nvmlProcessInfo_v2_t") == 0) return sizeof(nvmlProcessInfo_t);
    if (strcmp(name, "c_nvmlProcessUtilizationSample_t") == 0) {
        return sizeof(nvmlProcessUtilizationSample_t);
    }
    if (strcmp(name, "c_nvmlGpuInstanceInfo_t") == 0) return sizeof(nvmlGpuInstanceInfo_t);
    if (strcmp(name, "c_nvmlEventData_t") == 0) return sizeof(nvmlEventData_t);
    if (strcmp(name, "c_nvmlEventSet_t") == 0) return sizeof(nvmlEventSet_t);
    if (strcmp(name, "c_nvmlGpuFabricInfo_t") == 0) return sizeof(nvmlGpuFabricInfo_t);
    if (strcmp(name, "c_nvmlGpuFabricInfo_v2_t") == 0) return sizeof(nvmlGpuFabricInfo_v2_t);
    if (strcmp(name, "c_nvmlFieldValue_t") == 0) return sizeof(nvmlFieldValue_t);
    return -1;
}

/* --- Devices --------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (count_error != 0) return count_error;
    *count = gpu_count;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (index >= gpu_count || device == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    ENTER((nvmlDevice_t)&gpus[index], F_HANDLE);
    *device = (nvmlDevice_t)d;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    ENTER(device, F_UUID);
    return copy_string(uuid, length, d->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    ENTER(device, F_NAME);
    return copy_string(name, length, d->name);
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    ENTER(device, F_PCI);
    if (pci == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busId, sizeof pci->busId, "%.31s", d->pci);
    /* The legacy field holds the short form: "0000:17:00.0". */
    const char *colon = strchr(d->pci, ':');
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000%.11s", colon ? colon : "");
    unsigned int domain = 0, bus = 0, dev = 0;
    if (sscanf(d->pci, "%x:%x:%x", &domain, &bus, &dev) == 3) {
        pci->domain = domain;
        pci->bus = bus;
        pci->device = dev;
    }
    pci->pciDeviceId = 0x233010de;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    ENTER(device, F_MINOR);
    if (minor == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *minor = d->minor;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current,
                                  unsigned int *pending) {
    ENTER(device, F_MIG_MODE);
    if (current == NULL || pending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *current = (unsigned int)mig_on(d);
    *pending = d->mig_pending >= 0 ? (unsigned int)d->mig_pending : (unsigned int)mig_on(d);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    ENTER(device, F_MIG_MODE);
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *count = mig_on(d) ? d->max_mig : 0; /* nvml.h: zero if MIG is not enabled */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                 nvmlDevice_t *mig) {
    ENTER(device, F_MIG_MODE);
    if (d->parent != NULL || mig == NULL || index >= d->max_mig) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (!mig_on(d)) return NVML_ERROR_INVALID_ARGUMENT;
    fake_dev *child = &migs[d - gpus][index];
    if (!exists(child)) return NVML_ERROR_NOT_FOUND;
    /* "fail mig_handle CODE" in the MIG device's section: its slot's handle fails. */
    if (child->fail[F_MIG_HANDLE] != 0 && flagged(child->fail_flag[F_MIG_HANDLE])) {
        return child->fail[F_MIG_HANDLE];
    }
    *mig = (nvmlDevice_t)child;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    ENTER(device, F_GI);
    if (d->parent == NULL || id == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    ENTER(device, F_CI);
    if (d->parent == NULL || id == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *id = d->ci;
    return NVML_SUCCESS;
}

/* Called on the parent GPU; NOT_SUPPORTED without MIG mode, NOT_FOUND for no such GI. */
nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                          nvmlGpuInstance_t *instance) {
    ENTER(device, F_GI_BY_ID);
    if (d->parent != NULL || instance == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (!mig_on(d)) return NVML_ERROR_NOT_SUPPORTED;
    if (unprivileged) return NVML_ERROR_NO_PERMISSION;
    long gpu = d - gpus;
    for (unsigned int slot = 0; slot < MAX_MIGS; slot++) {
        fake_dev *mig = &migs[gpu][slot];
        if (exists(mig) && mig->gi == id) {
            gpu_instances[gpu][slot] = mig;
            *instance = (nvmlGpuInstance_t)&gpu_instances[gpu][slot];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t instance, nvmlGpuInstanceInfo_t *info) {
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    fake_dev **entry = (fake_dev **)instance;
    int known = entry >= &gpu_instances[0][0] && entry < &gpu_instances[MAX_GPUS - 1][MAX_MIGS];
    if (!known || *entry == NULL || info == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    fake_dev *mig = *entry;
    if (lost(mig, F_GI)) return NVML_ERROR_GPU_IS_LOST;
    info->device = (nvmlDevice_t)mig->parent;
    info->id = mig->gi;
    info->profileId = mig->gi_profile;
    info->placement.start = mig->placement_start;
    info->placement.size = mig->placement_size;
    return NVML_SUCCESS;
}

/* --- Telemetry ------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *util) {
    ENTER(device, F_UTIL);
    if (util == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    util->gpu = d->util_gpu;
    util->memory = d->util_mem;
    return NVML_SUCCESS;
}

/* The video engines' busy percent over NVML's own sampling period. */
static nvmlReturn_t video_utilization(nvmlDevice_t device, enum figure figure,
                                      unsigned int *utilization, unsigned int *period_us) {
    ENTER(device, figure);
    if (utilization == NULL || period_us == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent != NULL || mig_on(d)) return NVML_ERROR_NOT_SUPPORTED;
    *utilization = figure == F_ENCODER ? d->encoder_pct : d->decoder_pct;
    *period_us = 167000;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    return video_utilization(device, F_ENCODER, utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs) {
    return video_utilization(device, F_DECODER, utilization, samplingPeriodUs);
}

/* v1 counts reserved memory as used; v2 reports it apart (what nvidia-smi shows). */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    ENTER(device, F_MEMORY);
    if (aggregate_denied(d)) return NVML_ERROR_NO_PERMISSION;
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = d->mem_total;
    memory->used = d->mem_used + d->mem_reserved;
    memory->free = d->mem_total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    figure_calls[F_MEMORY_V2]++;
    if (atoi(driver_version) < 510) return NVML_ERROR_FUNCTION_NOT_FOUND;
    ENTER(device, F_MEMORY);
    if (aggregate_denied(d)) return NVML_ERROR_NO_PERMISSION;
    if (memory == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (memory->version != NVML_MEMORY_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = d->mem_total;
    memory->reserved = d->mem_reserved;
    memory->used = d->mem_used;
    memory->free = d->mem_total - d->mem_used - d->mem_reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power) {
    ENTER(device, F_POWER);
    if (power == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *power = d->power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device,
                                                 unsigned long long *energy) {
    ENTER(device, F_ENERGY);
    if (energy == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *energy = d->energy_mj;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temp) {
    figure_calls[F_TEMPERATURE_V]++;
    if (atoi(driver_version) < 565) return NVML_ERROR_FUNCTION_NOT_FOUND;
    ENTER(device, F_TEMPERATURE);
    if (temp == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (temp->version != NVML_TEMPERATURE_V1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (temp->sensorType != 0) return NVML_ERROR_INVALID_ARGUMENT;
    temp->temperature = (int)d->temperature;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, unsigned int sensor,
                                      unsigned int *temp) {
    ENTER(device, F_TEMPERATURE);
    if (temp == NULL || sensor != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *temp = d->temperature;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, unsigned int type,
                                    unsigned int *clock) {
    ENTER(device, F_CLOCK);
    if (clock == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (type != 1) return NVML_ERROR_NOT_SUPPORTED; /* only NVML_CLOCK_SM is faked */
    *clock = d->sm_clock;
    return NVML_SUCCESS;
}

/* R535 renamed "throttle reasons" to "clocks event reasons": before it, the new name
   is not in the library (pynvml's look-up answers FUNCTION_NOT_FOUND). */
static int before_r535(void) { return atoi(driver_version) < 535; }

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device,
                                                       unsigned long long *reasons) {
    ENTER(device, F_CLOCKS_EVENT);
    if (reasons == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *reasons = d->clocks_event;
    return NVML_SUCCESS;
}

/* Counted as "clocks_event_reasons" (asked by the new name), then as "clocks_event". */
nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device,
                                                    unsigned long long *reasons) {
    figure_calls[F_CLOCKS_EVENT_REASONS]++;
    if (before_r535()) return NVML_ERROR_FUNCTION_NOT_FOUND;
    return nvmlDeviceGetCurrentClocksThrottleReasons(device, reasons); /* same answer */
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, unsigned int error_type,
                                         unsigned int counter_type,
                                         unsigned long long *count) {
    ENTER(device, F_ECC);
    if (count == NULL || error_type > 1 || counter_type > 1) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long volatile_count = error_type == 0 ? d->ecc_corrected : d->ecc_uncorrected;
    /* A distinct aggregate figure, so a test notices the wrong counter type. */
    *count = counter_type == 0 ? volatile_count : volatile_count * 10 + 7;
    return NVML_SUCCESS;
}

/* Each asked field's own answer in its nvmlReturn; the call itself succeeds. */
/* Answers an NVLink field of a whole GPU with NVLinks (true), or leaves it (false). */
static int nvlink_field(const fake_dev *d, nvmlFieldValue_t *v) {
    if (d->parent != NULL || d->nvlinks == 0) return 0;
    long long value = -1;
    int traffic = v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ||
                  v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX;
    int nvlink5 = d->arch >= NVML_DEVICE_ARCH_BLACKWELL && d->arch != NVML_DEVICE_ARCH_UNKNOWN;
    int all_links = traffic;
    for (int i = 0; i < NVML_NVLINK5_ERROR_FIELDS && nvlink5; i++)
        if (v->fieldId == nvlink5_error_fields[i] && v->scopeId == 0xFFFFFFFFu) all_links = 1;
    if (v->fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT) {
        if (!d->nvlinks_uncounted) value = d->nvlink_count < 0 ? d->nvlinks : d->nvlink_count;
    } else if (traffic) {
        value = v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX ? d->nvlink_tx_kib
                                                                   : d->nvlink_rx_kib;
    } else {
        int known = 0;
        for (int i = 0; i < NVML_NVLINK_ERROR_FIELDS; i++) {
            if (v->fieldId != nvlink_error_fields[i]) continue;
            known = 1;
            value = d->nvlink_errors[i];
        }
        for (int i = 0; i < NVML_NVLINK5_ERROR_FIELDS && nvlink5; i++) {
            if (v->fieldId != nvlink5_error_fields[i]) continue;
            known = 1;
            value = d->nvlink5_errors[i];
            /* a link's own share where a link is asked; the total for all of them */
            if (value > 0 && v->scopeId != 0xFFFFFFFFu) value /= d->nvlinks;
        }
        if (!known) return 0;
    }
    if (all_links && !traffic && d->nvlink5_per_link && value >= 0) {
        v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT; /* a link ID only, as nvml.h says */
        return 1;
    }
    if (traffic && value == -2) { /* that field's own error */
        v->nvmlReturn = NVML_ERROR_UNKNOWN;
        return 1;
    }
    if (value < 0) return 0; /* NOT_SUPPORTED, by the caller */
    v->valueType = v->fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT
                       ? NVML_VALUE_TYPE_UNSIGNED_INT
                       : NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    if (v->valueType == NVML_VALUE_TYPE_UNSIGNED_INT)
        v->value.uiVal = (unsigned int)value;
    else
        v->value.ullVal = (unsigned long long)value;
    if (d->fail[F_NVLINK_FIELDS] != 0 && flagged(d->fail_flag[F_NVLINK_FIELDS])) {
        v->nvmlReturn = d->fail[F_NVLINK_FIELDS]; /* a value is left, yet undefined */
    } else if (traffic ? v->scopeId != 0xFFFFFFFFu : !all_links && v->scopeId >= d->nvlinks) {
        /* traffic: a link's own is not kept here; the others: not a link of the GPU */
        v->nvmlReturn = NVML_ERROR_INVALID_ARGUMENT;
    } else {
        v->nvmlReturn = NVML_SUCCESS;
    }
    return 1;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values) {
    ENTER(device, F_FIELDS);
    if (values == NULL || valuesCount < 0) return NVML_ERROR_INVALID_ARGUMENT;
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = 1700000000000000LL;
        v->latencyUsec = 0;
        if (nvlink_field(d, v)) continue;
        if (v->fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) {
            figure_calls[F_RECOVERY_ACTION]++;
            if (d->parent != NULL || d->recovery_action < 0) {
                v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            } else if (d->fail[F_RECOVERY_ACTION] != 0 && flagged(d->fail_flag[F_RECOVERY_ACTION])) {
                v->nvmlReturn = d->fail[F_RECOVERY_ACTION];
            } else {
                v->nvmlReturn = NVML_SUCCESS;
                v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
                v->value.uiVal = (unsigned int)d->recovery_action;
            }
            continue;
        }
        if (v->fieldId == NVML_FI_DEV_MEMORY_TEMP) figure_calls[F_MEMORY_TEMP]++;
        if (v->fieldId != NVML_FI_DEV_MEMORY_TEMP || !d->memory_temperature_known) {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        } else if (d->fail[F_MEMORY_TEMP] != 0 && flagged(d->fail_flag[F_MEMORY_TEMP])) {
            v->nvmlReturn = d->fail[F_MEMORY_TEMP];
        } else {
            v->nvmlReturn = NVML_SUCCESS;
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = d->memory_temperature;
        }
    }
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        for (unsigned int k = 0; k < d->field_as_count; k++) {
            if (v->nvmlReturn != NVML_SUCCESS || v->fieldId != d->field_as_ids[k]) continue;
            v->valueType = d->field_as_types[k];
            v->value = d->field_as_values[k];
        }
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info) {
    ENTER(device, F_FABRIC);
    if (info == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent != NULL) return NVML_ERROR_NOT_SUPPORTED;
    /* As a driver that copies its own struct whole: the padding after the one-byte
     * state is not zero (pynvml reads it as part of an unsigned int). */
    memset(info, 0xab, sizeof *info);
    info->status = d->fabric_status;
    info->cliqueId = 1;
    info->state = (unsigned char)d->fabric_state;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfo_v2_t *info) {
    ENTER(device, F_FABRIC);
    if (d->fabric_v1_only) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (info == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (info->version != NVML_GPU_FABRIC_INFO_V2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (d->parent != NULL) return NVML_ERROR_NOT_SUPPORTED;
    memset(info, 0xab, sizeof *info); /* the padding too, as above */
    info->version = NVML_GPU_FABRIC_INFO_V2;
    info->status = d->fabric_status;
    info->cliqueId = 1;
    info->state = (unsigned char)d->fabric_state;
    info->healthMask = d->fabric_health;
    return NVML_SUCCESS;
}

/* The GPU's architecture (nvml.h's nvmlDeviceArchitecture_t); MIG devices answer their
 * GPU's, as NVML does for the calls it allows them. */
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch) {
    ENTER(device, F_ARCHITECTURE);
    const fake_dev *gpu = d->parent != NULL ? d->parent : d;
    if (gpu->arch_missing) return NVML_ERROR_FUNCTION_NOT_FOUND;
    if (arch == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    *arch = gpu->arch;
    return NVML_SUCCESS;
}

/* A link's state (nvml.h: "For Pascal or newer"). */
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      unsigned int *isActive) {
    ENTER(device, F_NVLINK_STATE);
    if (isActive == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent != NULL || d->nvlinks == 0) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= d->nvlinks) return NVML_ERROR_INVALID_ARGUMENT;
    if (link < 64 && (d->nvlinks_absent >> link) & 1ULL) return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < d->nvlink_error_count; i++)
        if (d->nvlink_error_links[i] == link) return d->nvlink_error_codes[i];
    int down = mig_on(d) || (link < 64 && (d->nvlinks_down >> link) & 1ULL);
    *isActive = down ? NVML_FEATURE_DISABLED : NVML_FEATURE_ENABLED;
    return NVML_SUCCESS;
}

/* PCIe replays of the GPU's link; asked of whole GPUs only. */
nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    ENTER(device, F_REPLAYS);
    if (value == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent != NULL) return NVML_ERROR_NOT_SUPPORTED;
    *value = d->pcie_replays;
    return NVML_SUCCESS;
}

/* Rows remapped (recorded in the InfoROM), by the kind of error that caused them, and
 * the two flags; nvml.h: "On MIG-enabled GPUs with active instances, querying the
 * number of remapped rows is not supported". */
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    ENTER(device, F_REMAP);
    if (corrRows == NULL || uncRows == NULL || isPending == NULL || failureOccurred == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent == NULL && mig_on(d)) return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = d->remap_correctable;
    *uncRows = d->remap_uncorrectable;
    *isPending = d->remap_pending;
    *failureOccurred = d->remap_failure;
    return NVML_SUCCESS;
}

/* Retired pages of one cause (0: multiple single-bit, 1: double-bit ECC errors); a
 * count of 0 asks the size, and too small a count answers INSUFFICIENT_SIZE with the
 * size needed (nvml.h). The addresses are made up, one page apart. */
nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                       unsigned long long *addresses) {
    ENTER(device, F_RETIRED);
    if (pageCount == NULL || cause < 0 || cause > 1) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->retired_known) return NVML_ERROR_NOT_SUPPORTED;
    unsigned int found = cause == 0 ? d->retired_sbe : d->retired_dbe;
    if (*pageCount < found || (found > 0 && addresses == NULL)) {
        *pageCount = found;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned int i = 0; i < found; i++) addresses[i] = 0x10000ULL * (i + 1);
    *pageCount = found;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending) {
    ENTER(device, F_RETIRED);
    if (isPending == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->retired_known) return NVML_ERROR_NOT_SUPPORTED;
    *isPending = d->retired_pending != 0; /* nvmlEnableState_t */
    return NVML_SUCCESS;
}

/* --- Processes --------------------------------------------------------------------------- */

/* The running-process lists: the size query answers INSUFFICIENT_SIZE with the count
 * (SUCCESS when there is none), as NVML does. ``infos`` points to entries of the caller's
 * size; an R535 driver writes its own 32-byte ones from the _v3 lists regardless. */
static nvmlReturn_t running_processes(nvmlDevice_t device, int kind, int v3,
                                      unsigned int *count, void *infos) {
    ENTER(device, F_PROCS);
    if (v3 && d->fail[F_PROCS_V3] != 0) return d->fail[F_PROCS_V3];
    if (aggregate_denied(d)) return NVML_ERROR_NO_PERMISSION;
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int found = 0;
    fake_proc *listed[MAX_PROCS];
    for (unsigned int i = 0; i < d->proc_count; i++) {
        fake_proc *proc = &d->procs[i];
        if (proc->kind != kind) continue;
        if (!flagged(proc->alive_flag)) continue;
        listed[found++] = proc;
    }
    if (infos == NULL || *count < found) {
        *count = found;
        return found == 0 ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
    }
    int r535 = v3 && strncmp(driver_version, "535.", 4) == 0;
    for (unsigned int i = 0; i < found; i++) {
        nvmlProcessInfo_t info = {
            .pid = listed[i]->pid,
            .usedGpuMemory = listed[i]->memory,
            .gpuInstanceId = d->parent != NULL ? d->gi : 0xFFFFFFFFu,
            .computeInstanceId = d->parent != NULL ? d->ci : 0xFFFFFFFFu,
        };
        if (r535) {
            nvmlProcessInfo_r535_v3_t *entry = (nvmlProcessInfo_r535_v3_t *)infos + i;
            memset(entry, 0, sizeof *entry);
            entry->pid = info.pid;
            entry->usedGpuMemory = info.usedGpuMemory;
            entry->gpuInstanceId = info.gpuInstanceId;
            entry->computeInstanceId = info.computeInstanceId;
        } else {
            ((nvmlProcessInfo_t *)infos)[i] = info;
        }
    }
    *count = found;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(device, 0, 1, count, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                     nvmlProcessInfo_t *infos) {
    return running_processes(device, 0, 0, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    return running_processes(device, 1, 1, count, infos);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *count,
                                                      nvmlProcessInfo_t *infos) {
    return running_processes(device, 1, 0, count, infos);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device,
                                                        unsigned int *count,
                                                        nvmlProcessInfo_t *infos) {
    return running_processes(device, 2, 1, count, infos);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device,
                                                        unsigned int *count,
                                                        nvmlProcessInfo_t *infos) {
    return running_processes(device, 2, 0, count, infos);
}

/* Samples newer than lastSeen; NOT_FOUND when there is none, as NVML answers. */
nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t device,
                                             nvmlProcessUtilizationSample_t *utilization,
                                             unsigned int *count,
                                             unsigned long long lastSeen) {
    ENTER(device, F_PROC_UTIL);
    if (count == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int found = 0;
    for (unsigned int i = 0; i < d->sample_count; i++) {
        if (d->samples[i].timestamp > lastSeen && flagged(d->samples[i].present_flag)) found++;
    }
    if (found == 0 && samples_none_success) {
        *count = 0;
        return NVML_SUCCESS;
    }
    if (found == 0) return NVML_ERROR_NOT_FOUND;
    if (utilization == NULL || *count < found) {
        *count = found;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    unsigned int n = 0;
    for (unsigned int i = 0; i < d->sample_count; i++) {
        fake_sample *sample = &d->samples[i];
        if (sample->timestamp <= lastSeen || !flagged(sample->present_flag)) continue;
        memset(&utilization[n], 0, sizeof utilization[n]);
        utilization[n].pid = sample->pid;
        utilization[n].timeStamp = sample->timestamp;
        utilization[n].smUtil = sample->sm;
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

/* --- GPM ---------------------------------------------------------------------------------- */

nvmlReturn_t nvmlGpmQueryDeviceSupport(nvmlDevice_t device, nvmlGpmSupport_t *support) {
    if (gpm_missing) return NVML_ERROR_FUNCTION_NOT_FOUND;
    ENTER(device, F_GPM_SUPPORT);
    if (support == NULL || support->version != 1) return NVML_ERROR_INVALID_ARGUMENT;
    support->isSupportedDevice = d->gpm_known ? 1 : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleAlloc(nvmlGpmSample_t *sample) {
    if (sample == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmSample_t made = calloc(1, sizeof *made);
    if (made == NULL) return NVML_ERROR_MEMORY;
    made->magic = GPM_SAMPLE_MAGIC;
    gpm_samples_live++;
    *sample = made;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleFree(nvmlGpmSample_t sample) {
    if (sample == NULL || sample->magic != GPM_SAMPLE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    sample->magic = 0; /* a second free of it is caught above, while the memory lasts */
    free(sample);
    gpm_samples_live--;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmSampleGet(nvmlDevice_t device, nvmlGpmSample_t sample) {
    ENTER(device, F_GPM_SAMPLE);
    if (sample == NULL || sample->magic != GPM_SAMPLE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (!d->gpm_known) return NVML_ERROR_NOT_SUPPORTED;
    sample->device = d;
    sample->sequence = ++gpm_sequence;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMigSampleGet(nvmlDevice_t device, unsigned int gpuInstanceId,
                                 nvmlGpmSample_t sample) {
    if (gpm_mig_missing) return NVML_ERROR_FUNCTION_NOT_FOUND;
    ENTER(device, F_GPM_MIG_SAMPLE);
    if (sample == NULL || sample->magic != GPM_SAMPLE_MAGIC) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->parent != NULL) return NVML_ERROR_INVALID_ARGUMENT; /* a GPU's handle only */
    fake_dev *first = NULL;
    for (int m = 0; m < MAX_MIGS && first == NULL; m++) {
        fake_dev *mig = &migs[d - gpus][m];
        if (exists(mig) && mig->gi == gpuInstanceId) first = mig;
    }
    if (first == NULL) return NVML_ERROR_NOT_FOUND;
    if (!first->gpm_known) return NVML_ERROR_NOT_SUPPORTED;
    sample->device = first;
    sample->sequence = ++gpm_sequence;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpmMetricsGet(nvmlGpmMetricsGet_t *get) {
    figure_calls[F_GPM_METRICS]++;
    if (init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (get == NULL || get->version != 1) return NVML_ERROR_INVALID_ARGUMENT;
    nvmlGpmSample_t older = get->sample1, newer = get->sample2;
    if (older == NULL || newer == NULL || older->magic != GPM_SAMPLE_MAGIC ||
        newer->magic != GPM_SAMPLE_MAGIC || older->sequence == 0 ||
        older->device != newer->device || older->sequence >= newer->sequence ||
        get->numMetrics > PYNVML_GPM_METRIC_MAX) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    fake_dev *d = newer->device;
    if (lost(d, F_GPM_METRICS)) return NVML_ERROR_GPU_IS_LOST;
    if (d->fail[F_GPM_METRICS] != 0 && flagged(d->fail_flag[F_GPM_METRICS])) {
        return d->fail[F_GPM_METRICS];
    }
    for (unsigned int i = 0; i < get->numMetrics; i++) {
        nvmlGpmMetric_t *metric = &get->metrics[i];
        metric->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        metric->value = 0.0;
        for (int k = 0; k < FAKE_GPM_METRICS; k++) {
            if (gpm_metric_ids[k] != metric->metricId) continue;
            double value = d->gpm[k];
            if (value == -2.0) {
                metric->nvmlReturn = NVML_ERROR_UNKNOWN;
            } else if (value <= -3.0) {
                metric->nvmlReturn = (nvmlReturn_t)-value;
            } else if (value != -1.0) {
                metric->nvmlReturn = NVML_SUCCESS;
                metric->value = value;
            }
        }
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, unsigned int *mode) {
    ENTER(device, F_VIRTUALIZATION);
    if (mode == NULL) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->virtualization < 0) return NVML_ERROR_NOT_SUPPORTED;
    *mode = (unsigned int)d->virtualization;
    return NVML_SUCCESS;
}
