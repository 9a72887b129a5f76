#pragma once
/* The subset of the CUDA Driver API that sparsert uses, declared without the CUDA toolkit.
 *
 * Both the runtime's driver wrapper (which dlopen()s libcuda.so.1, or whatever SPARSERT_LIBCUDA names, and dlsym()s
 * the names below) and the emulated driver libsparsert_cuda_emu.so are written against this header, so the numeric
 * values and signatures here are those of the real driver ABI.
 *
 * Exported names: the real libcuda keeps old ABI versions under the plain names (cuMemAlloc takes a 32-bit pointer,
 * cuCtxCreate is the v1 entry point...), and cuda.h #defines the plain names to the current versions. Resolve the
 * versioned names listed in the SPARSERT_CUDA_DRIVER_FUNCTIONS table with dlsym. The emulator also exports the plain
 * names, with the current (versioned) signatures, for callers that resolve those.
 */
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError_enum {
  CUDA_SUCCESS = 0,
  CUDA_ERROR_INVALID_VALUE = 1,
  CUDA_ERROR_OUT_OF_MEMORY = 2,
  CUDA_ERROR_NOT_INITIALIZED = 3,
  CUDA_ERROR_DEINITIALIZED = 4,
  CUDA_ERROR_NO_DEVICE = 100,
  CUDA_ERROR_INVALID_DEVICE = 101,
  CUDA_ERROR_INVALID_IMAGE = 200,
  CUDA_ERROR_INVALID_CONTEXT = 201,
  CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
  CUDA_ERROR_INVALID_PTX = 218,
  CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222,
  CUDA_ERROR_INVALID_SOURCE = 300,
  CUDA_ERROR_INVALID_HANDLE = 400,
  CUDA_ERROR_ILLEGAL_STATE = 401,
  CUDA_ERROR_NOT_FOUND = 500,
  CUDA_ERROR_NOT_READY = 600,
  CUDA_ERROR_ILLEGAL_ADDRESS = 700,
  CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
  CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE = 708,
  CUDA_ERROR_CONTEXT_IS_DESTROYED = 709,
  CUDA_ERROR_ASSERT = 710,
  CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
  CUDA_ERROR_MISALIGNED_ADDRESS = 716,
  CUDA_ERROR_LAUNCH_FAILED = 719,
  CUDA_ERROR_NOT_SUPPORTED = 801,
  CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900,
  CUDA_ERROR_STREAM_CAPTURE_INVALIDATED = 901,
  CUDA_ERROR_STREAM_CAPTURE_MERGE = 902,
  CUDA_ERROR_STREAM_CAPTURE_UNMATCHED = 903,
  CUDA_ERROR_STREAM_CAPTURE_UNJOINED = 904,
  CUDA_ERROR_STREAM_CAPTURE_ISOLATION = 905,
  CUDA_ERROR_STREAM_CAPTURE_IMPLICIT = 906,
  CUDA_ERROR_CAPTURED_EVENT = 907,
  CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD = 908,
  CUDA_ERROR_UNKNOWN = 999
} CUresult;

typedef int CUdevice;
typedef unsigned long long CUdeviceptr; /* CUdeviceptr_v2 on 64-bit hosts */
typedef struct CUctx_st* CUcontext;
typedef struct CUmod_st* CUmodule;
typedef struct CUfunc_st* CUfunction;
typedef struct CUstream_st* CUstream;
typedef struct CUevent_st* CUevent;
typedef struct CUgraph_st* CUgraph;
typedef struct CUgraphNode_st* CUgraphNode;
typedef struct CUgraphExec_st* CUgraphExec;

#define CU_STREAM_LEGACY ((CUstream)0x1)
#define CU_STREAM_PER_THREAD ((CUstream)0x2)

typedef enum CUstream_flags_enum { CU_STREAM_DEFAULT = 0x0, CU_STREAM_NON_BLOCKING = 0x1 } CUstream_flags;
typedef enum CUevent_flags_enum {
  CU_EVENT_DEFAULT = 0x0,
  CU_EVENT_BLOCKING_SYNC = 0x1,
  CU_EVENT_DISABLE_TIMING = 0x2,
  CU_EVENT_INTERPROCESS = 0x4
} CUevent_flags;
/* cuMemHostAlloc flags. */
#define CU_MEMHOSTALLOC_PORTABLE 0x01
#define CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define CU_MEMHOSTALLOC_WRITECOMBINED 0x04

typedef enum CUevent_wait_flags_enum { CU_EVENT_WAIT_DEFAULT = 0x0, CU_EVENT_WAIT_EXTERNAL = 0x1 } CUevent_wait_flags;

typedef enum CUstreamCaptureMode_enum {
  CU_STREAM_CAPTURE_MODE_GLOBAL = 0,
  CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1,
  CU_STREAM_CAPTURE_MODE_RELAXED = 2
} CUstreamCaptureMode;

/* cuPointerGetAttribute: the ordinal of the device whose memory a pointer is (an int). */
typedef enum CUpointer_attribute_enum { CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9 } CUpointer_attribute;

typedef enum CUstreamCaptureStatus_enum {
  CU_STREAM_CAPTURE_STATUS_NONE = 0,
  CU_STREAM_CAPTURE_STATUS_ACTIVE = 1,
  CU_STREAM_CAPTURE_STATUS_INVALIDATED = 2
} CUstreamCaptureStatus;

typedef enum CUdevice_attribute_enum {
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X = 2,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y = 3,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z = 4,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X = 5,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y = 6,
  CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z = 7,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK = 8,
  CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY = 9,
  CU_DEVICE_ATTRIBUTE_WARP_SIZE = 10,
  CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK = 12,
  CU_DEVICE_ATTRIBUTE_CLOCK_RATE = 13,
  CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16,
  CU_DEVICE_ATTRIBUTE_INTEGRATED = 18,
  CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS = 31,
  CU_DEVICE_ATTRIBUTE_ECC_ENABLED = 32,
  CU_DEVICE_ATTRIBUTE_PCI_BUS_ID = 33,
  CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID = 34,
  CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE = 36,
  CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH = 37,
  CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE = 38,
  CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR = 39,
  CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING = 41,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75,
  CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR = 81,
  CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR = 82,
  CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN = 97,
  CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR = 106
} CUdevice_attribute;

typedef enum CUfunction_attribute_enum {
  CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0,
  CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1,
  CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2,
  CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3,
  CU_FUNC_ATTRIBUTE_NUM_REGS = 4,
  CU_FUNC_ATTRIBUTE_PTX_VERSION = 5,
  CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6,
  CU_FUNC_ATTRIBUTE_CACHE_MODE_CA = 7,
  CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8,
  CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT = 9
} CUfunction_attribute;

typedef enum CUjit_option_enum {
  CU_JIT_MAX_REGISTERS = 0,
  CU_JIT_THREADS_PER_BLOCK = 1,
  CU_JIT_WALL_TIME = 2,
  CU_JIT_INFO_LOG_BUFFER = 3,
  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES = 4,
  CU_JIT_ERROR_LOG_BUFFER = 5,
  CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
  CU_JIT_OPTIMIZATION_LEVEL = 7,
  CU_JIT_TARGET_FROM_CUCONTEXT = 8,
  CU_JIT_TARGET = 9,
  CU_JIT_FALLBACK_STRATEGY = 10,
  CU_JIT_GENERATE_DEBUG_INFO = 11,
  CU_JIT_LOG_VERBOSE = 12,
  CU_JIT_GENERATE_LINE_INFO = 13,
  CU_JIT_CACHE_MODE = 14
} CUjit_option;

/* cuLaunchKernelEx's configuration (CUDA 12.0+), with the one attribute sparsert sets. Layouts as in cuda.h: the
   attribute's id is padded to 8 bytes, its value is a 64-byte union. */
typedef enum CUlaunchAttributeID_enum {
  CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
} CUlaunchAttributeID;
typedef union CUlaunchAttributeValue_union {
  char pad[64];
  int programmaticStreamSerializationAllowed;
} CUlaunchAttributeValue;
typedef struct CUlaunchAttribute_st {
  CUlaunchAttributeID id;
  char pad[8 - sizeof(CUlaunchAttributeID)];
  CUlaunchAttributeValue value;
} CUlaunchAttribute;
typedef struct CUlaunchConfig_st {
  unsigned int gridDimX;
  unsigned int gridDimY;
  unsigned int gridDimZ;
  unsigned int blockDimX;
  unsigned int blockDimY;
  unsigned int blockDimZ;
  unsigned int sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned int numAttrs;
} CUlaunchConfig;
/* cuMemcpy3DAsync's description of a copy of Depth x Height rows of WidthInBytes, laid out as in cuda.h (arrays are
   not used: an opaque handle). sparsert copies between device buffers of different row and plane pitches with it. */
typedef enum CUmemorytype_enum {
  CU_MEMORYTYPE_HOST = 0x01,
  CU_MEMORYTYPE_DEVICE = 0x02,
  CU_MEMORYTYPE_ARRAY = 0x03,
  CU_MEMORYTYPE_UNIFIED = 0x04
} CUmemorytype;
typedef struct CUarray_st* CUarray;
typedef struct CUDA_MEMCPY3D_st {
  size_t srcXInBytes;
  size_t srcY;
  size_t srcZ;
  size_t srcLOD;
  CUmemorytype srcMemoryType;
  const void* srcHost;
  CUdeviceptr srcDevice;
  CUarray srcArray;
  void* reserved0;
  size_t srcPitch;
  size_t srcHeight;
  size_t dstXInBytes;
  size_t dstY;
  size_t dstZ;
  size_t dstLOD;
  CUmemorytype dstMemoryType;
  void* dstHost;
  CUdeviceptr dstDevice;
  CUarray dstArray;
  void* reserved1;
  size_t dstPitch;
  size_t dstHeight;
  size_t WidthInBytes;
  size_t Height;
  size_t Depth;
} CUDA_MEMCPY3D;
#ifndef CUDAAPI
#define CUDAAPI
#endif

/* X(exported name, return-and-parameter list) for every entry point sparsert resolves; the driver wrapper can
 * expand it into function-pointer members and dlsym calls. */
#define SPARSERT_CUDA_DRIVER_FUNCTIONS(X)                                                                         \
  X(cuInit, (unsigned int flags))                                                                                \
  X(cuDriverGetVersion, (int* driverVersion))                                                                    \
  X(cuGetErrorName, (CUresult error, const char** pStr))                                                         \
  X(cuGetErrorString, (CUresult error, const char** pStr))                                                       \
  X(cuDeviceGet, (CUdevice * device, int ordinal))                                                               \
  X(cuDeviceGetCount, (int* count))                                                                              \
  X(cuDeviceGetName, (char* name, int len, CUdevice dev))                                                        \
  X(cuDeviceGetAttribute, (int* pi, CUdevice_attribute attrib, CUdevice dev))                                    \
  X(cuDeviceTotalMem_v2, (size_t * bytes, CUdevice dev))                                                         \
  X(cuDeviceComputeCapability, (int* major, int* minor, CUdevice dev))                                           \
  X(cuDevicePrimaryCtxRetain, (CUcontext * pctx, CUdevice dev))                                                  \
  X(cuDevicePrimaryCtxRelease_v2, (CUdevice dev))                                                                \
  X(cuCtxCreate_v2, (CUcontext * pctx, unsigned int flags, CUdevice dev))                                        \
  X(cuCtxDestroy_v2, (CUcontext ctx))                                                                            \
  X(cuCtxSetCurrent, (CUcontext ctx))                                                                            \
  X(cuCtxGetCurrent, (CUcontext * pctx))                                                                         \
  X(cuCtxSynchronize, (void))                                                                                    \
  X(cuModuleLoadData, (CUmodule * module, const void* image))                                                    \
  X(cuModuleLoadDataEx,                                                                                          \
    (CUmodule * module, const void* image, unsigned int numOptions, CUjit_option* options, void** optionValues)) \
  X(cuModuleUnload, (CUmodule hmod))                                                                             \
  X(cuModuleGetFunction, (CUfunction * hfunc, CUmodule hmod, const char* name))                                  \
  X(cuModuleGetGlobal_v2, (CUdeviceptr * dptr, size_t * bytes, CUmodule hmod, const char* name))                 \
  X(cuFuncGetAttribute, (int* pi, CUfunction_attribute attrib, CUfunction hfunc))                                \
  X(cuMemAlloc_v2, (CUdeviceptr * dptr, size_t bytesize))                                                        \
  X(cuMemFree_v2, (CUdeviceptr dptr))                                                                            \
  X(cuMemGetAddressRange_v2, (CUdeviceptr * pbase, size_t * psize, CUdeviceptr dptr))                          \
  X(cuPointerGetAttribute, (void* data, CUpointer_attribute attribute, CUdeviceptr ptr))                         \
  X(cuMemHostAlloc, (void** pp, size_t bytesize, unsigned int Flags))                                            \
  X(cuMemFreeHost, (void* p))                                                                                    \
  X(cuMemcpyHtoD_v2, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount))                             \
  X(cuMemcpyDtoH_v2, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount))                                   \
  X(cuMemcpyDtoD_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount))                           \
  X(cuMemcpyHtoDAsync_v2, (CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream))      \
  X(cuMemcpyDtoHAsync_v2, (void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))            \
  X(cuMemcpyDtoDAsync_v2, (CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream))    \
  X(cuMemcpy3DAsync_v2, (const CUDA_MEMCPY3D* pCopy, CUstream hStream))                                          \
  X(cuMemsetD8_v2, (CUdeviceptr dstDevice, unsigned char uc, size_t N))                                          \
  X(cuMemsetD32_v2, (CUdeviceptr dstDevice, unsigned int ui, size_t N))                                          \
  X(cuMemsetD8Async, (CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream))                       \
  X(cuMemsetD32Async, (CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream))                      \
  X(cuStreamCreate, (CUstream * phStream, unsigned int Flags))                                                   \
  X(cuStreamDestroy_v2, (CUstream hStream))                                                                      \
  X(cuStreamSynchronize, (CUstream hStream))                                                                     \
  X(cuEventCreate, (CUevent * phEvent, unsigned int Flags))                                                      \
  X(cuEventRecord, (CUevent hEvent, CUstream hStream))                                                           \
  X(cuStreamWaitEvent, (CUstream hStream, CUevent hEvent, unsigned int Flags))                                   \
  X(cuEventSynchronize, (CUevent hEvent))                                                                        \
  X(cuEventQuery, (CUevent hEvent))                                                                              \
  X(cuEventElapsedTime_v2, (float* pMilliseconds, CUevent hStart, CUevent hEnd))                                 \
  X(cuEventDestroy_v2, (CUevent hEvent))                                                                         \
  X(cuLaunchKernel,                                                                                              \
    (CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ, unsigned int blockDimX,  \
     unsigned int blockDimY, unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,              \
     void** kernelParams, void** extra))                                                                         \
  X(cuLaunchKernelEx, (const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra))           \
  X(cuStreamBeginCapture_v2, (CUstream hStream, CUstreamCaptureMode mode))                                       \
  X(cuStreamEndCapture, (CUstream hStream, CUgraph * phGraph))                                                   \
  X(cuStreamIsCapturing, (CUstream hStream, CUstreamCaptureStatus * captureStatus))                              \
  X(cuGraphInstantiateWithFlags, (CUgraphExec * phGraphExec, CUgraph hGraph, unsigned long long flags))          \
  X(cuGraphLaunch, (CUgraphExec hGraphExec, CUstream hStream))                                                   \
  X(cuGraphExecDestroy, (CUgraphExec hGraphExec))                                                                \
  X(cuGraphDestroy, (CUgraph hGraph))

#define SPARSERT_CUDA_DECLARE_(name, params) CUresult CUDAAPI name params;
SPARSERT_CUDA_DRIVER_FUNCTIONS(SPARSERT_CUDA_DECLARE_)
#undef SPARSERT_CUDA_DECLARE_

/* Function-pointer types, e.g. PFN_sparsert_cuMemAlloc_v2, for dlsym results. */
#define SPARSERT_CUDA_PFN_(name, params) typedef CUresult(CUDAAPI* PFN_sparsert_##name) params;
SPARSERT_CUDA_DRIVER_FUNCTIONS(SPARSERT_CUDA_PFN_)
#undef SPARSERT_CUDA_PFN_

#ifdef __cplusplus
}
#endif
