// accio declares the few CUDA driver types and constants it uses itself (src/mem/cuda.hpp), so that
// it builds without the CUDA toolkit. Where the toolkit is installed, this test checks them against
// cuda.h at compile time: a wrong value or signature fails the build, not a GPU run.
#include <gtest/gtest.h>

#include <array>
#include <type_traits>

#include "mem/cuda.hpp"

#if __has_include(<cuda.h>)
#include <cuda.h>
namespace cu = accio::mem::cuda;
#define SAME(ours, theirs) static_assert(static_cast<long>(ours) == static_cast<long>(theirs), #ours " != " #theirs)
static_assert(sizeof(cu::CUdeviceptr) == sizeof(CUdeviceptr));
SAME(cu::kSuccess, CUDA_SUCCESS);
SAME(cu::kErrorInvalidValue, CUDA_ERROR_INVALID_VALUE);
SAME(cu::kErrorOutOfMemory, CUDA_ERROR_OUT_OF_MEMORY);
SAME(cu::kErrorNotReady, CUDA_ERROR_NOT_READY);
SAME(cu::kErrorHostMemoryAlreadyRegistered, CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
SAME(cu::kPtrContext, CU_POINTER_ATTRIBUTE_CONTEXT);
SAME(cu::kPtrMemoryType, CU_POINTER_ATTRIBUTE_MEMORY_TYPE);
SAME(cu::kPtrBufferId, CU_POINTER_ATTRIBUTE_BUFFER_ID);
SAME(cu::kPtrIsManaged, CU_POINTER_ATTRIBUTE_IS_MANAGED);
SAME(cu::kPtrDeviceOrdinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL);
SAME(cu::kPtrRangeStart, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR);
SAME(cu::kPtrRangeSize, CU_POINTER_ATTRIBUTE_RANGE_SIZE);
SAME(cu::kMemHost, CU_MEMORYTYPE_HOST);
SAME(cu::kMemDevice, CU_MEMORYTYPE_DEVICE);
SAME(cu::kMemArray, CU_MEMORYTYPE_ARRAY);
SAME(cu::kMemUnified, CU_MEMORYTYPE_UNIFIED);
SAME(cu::kAttrMultiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
SAME(cu::kAttrPciBusId, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID);
SAME(cu::kAttrPciDeviceId, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID);
SAME(cu::kAttrPciDomainId, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);
SAME(cu::kAttrAsyncEngines, CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT);
SAME(cu::kAttrUnifiedAddressing, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING);
SAME(cu::kAttrCcMajor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
SAME(cu::kAttrCcMinor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
SAME(cu::kAttrReadOnlyHostRegister, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED);
SAME(cu::kHostRegisterPortable, CU_MEMHOSTREGISTER_PORTABLE);
SAME(cu::kHostRegisterReadOnly, CU_MEMHOSTREGISTER_READ_ONLY);
SAME(cu::kMemAttachGlobal, CU_MEM_ATTACH_GLOBAL);
SAME(cu::kStreamNonBlocking, CU_STREAM_NON_BLOCKING);
SAME(cu::kEventDisableTiming, CU_EVENT_DISABLE_TIMING);
// Signatures: every entry point has the toolkit's arity, and each parameter and the result the same
// size (our handles and enums are opaque pointers and ints where cuda.h has structs and enums).
template <class>
struct Sig;
template <class R, class... A>
struct Sig<R (*)(A...)> {
  static constexpr std::array<size_t, sizeof...(A) + 1> sizes{sizeof(R), sizeof(A)...};
};
template <class R, class... A>
struct Sig<R(A...)> : Sig<R (*)(A...)> {};
#define SAME_SIG(member, fn)                                                                    \
  static_assert(Sig<decltype(cu::Driver::member)>::sizes.size() == Sig<decltype(fn)>::sizes.size() && \
                    Sig<decltype(cu::Driver::member)>::sizes == Sig<decltype(fn)>::sizes,           \
                #member " does not match " #fn)
SAME_SIG(Init, cuInit);
SAME_SIG(DriverGetVersion, cuDriverGetVersion);
SAME_SIG(GetErrorName, cuGetErrorName);
SAME_SIG(GetErrorString, cuGetErrorString);
SAME_SIG(DeviceGetCount, cuDeviceGetCount);
SAME_SIG(DeviceGet, cuDeviceGet);
SAME_SIG(DeviceGetName, cuDeviceGetName);
SAME_SIG(DeviceGetAttribute, cuDeviceGetAttribute);
SAME_SIG(DeviceTotalMem, cuDeviceTotalMem_v2);
SAME_SIG(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
SAME_SIG(CtxPushCurrent, cuCtxPushCurrent_v2);
SAME_SIG(CtxPopCurrent, cuCtxPopCurrent_v2);
SAME_SIG(CtxGetCurrent, cuCtxGetCurrent);
SAME_SIG(CtxGetDevice, cuCtxGetDevice);
#if CUDA_VERSION >= 12000
SAME_SIG(CtxGetId, cuCtxGetId);
#endif
SAME_SIG(PointerGetAttributes, cuPointerGetAttributes);
SAME_SIG(MemAlloc, cuMemAlloc_v2);
SAME_SIG(MemAllocManaged, cuMemAllocManaged);
SAME_SIG(MemFree, cuMemFree_v2);
SAME_SIG(MemGetInfo, cuMemGetInfo_v2);
SAME_SIG(MemHostRegister, cuMemHostRegister_v2);
SAME_SIG(MemHostUnregister, cuMemHostUnregister);
SAME_SIG(Memcpy, cuMemcpy);
SAME_SIG(MemcpyHtoD, cuMemcpyHtoD_v2);
SAME_SIG(MemcpyDtoH, cuMemcpyDtoH_v2);
SAME_SIG(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2);
SAME_SIG(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2);
SAME_SIG(StreamCreate, cuStreamCreate);
SAME_SIG(StreamDestroy, cuStreamDestroy_v2);
SAME_SIG(StreamSynchronize, cuStreamSynchronize);
SAME_SIG(EventCreate, cuEventCreate);
SAME_SIG(EventDestroy, cuEventDestroy_v2);
SAME_SIG(EventRecord, cuEventRecord);
SAME_SIG(EventSynchronize, cuEventSynchronize);
constexpr bool kHaveToolkit = true;
#else
constexpr bool kHaveToolkit = false;
#endif

TEST(CudaAbi, DeclarationsMatchTheToolkit) {
  if (!kHaveToolkit) GTEST_SKIP() << "cuda.h not found: declarations not checked";
  SUCCEED();
}
