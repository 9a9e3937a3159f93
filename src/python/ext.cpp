// accio Python extension (nanobind): exposes the C++ API (include/accio/accio.hpp, itself over the
// stable C API) to the Python package. Buffers come in as GPU objects (DLPack, __cuda_array_interface__,
// with the producer's stream honoured), through the buffer protocol, or as CPU DLPack (class View); the
// GIL is released for every transfer; errors become OSError subclasses (accio._errors).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "accio/accio.hpp"
#include "bench_phase.hpp"
#include "../base/variables.h"
#include "../preload/run_cli.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace {

// What View accepts, for its errors.
constexpr const char* kAccepted =
    "accio takes a contiguous buffer: a bytes-like object (bytes, bytearray, memoryview, mmap), a NumPy "
    "array, a GPU array with DLPack (__dlpack__ and __dlpack_device__: CuPy, PyTorch, JAX) or "
    "__cuda_array_interface__ (CuPy, Numba, PyTorch), or a CPU array with DLPack";

// DLPack device types (dlpack.h's DLDeviceType) of GPU memory: device and managed memory, which a
// producer orders against a stream.
bool dlpack_is_cuda(int type) { return type == nb::device::cuda::value || type == nb::device::cuda_managed::value; }
// Of host memory: the CPU's, and CUDA-pinned host memory (kDLCUDAHost: PyTorch's pin_memory()
// tensors report it from __dlpack_device__, refuse a stream, and export a kDLCPU capsule).
bool dlpack_is_host(int type) { return type == nb::device::cpu::value || type == nb::device::cuda_host::value; }

// f() with GPU `device` the current one (the thread's own context where it is on that GPU, else the
// GPU's primary context if active: accio_cuda_with_device), so that a producer asked to export an
// array of that GPU does it there: PyTorch refuses a tensor of
// another GPU than the current one (BufferError), and CuPy and PyTorch order their work on the
// current GPU's streams. Without a driver or such a GPU, f() as it is (the errors come later).
template <class F>
nb::object on_device(int device, F f) {
  struct Call {
    F* f;
    nb::object result;
    std::exception_ptr error;
    bool ran = false;
  } call{&f, {}, {}, false};
  accio_cuda_with_device(device, [](void* p) {
    Call& c = *static_cast<Call*>(p);
    c.ran = true;
    try {
      c.result = (*c.f)();
    } catch (...) {
      c.error = std::current_exception();
    }
  }, &call);
  if (call.error) std::rethrow_exception(call.error);
  return call.ran ? std::move(call.result) : f();
}

std::string what(nb::handle obj) { return nb::inst_name(obj).c_str(); }

// Waits for the producer's work on a CUDA stream (accio_cuda_stream_sync), without the GIL.
void sync_stream(int device, uintptr_t stream) {
  int rc;
  {
    nb::gil_scoped_release nogil;
    rc = accio_cuda_stream_sync(device, stream);
  }
  accio::detail::check(rc);
}

// Whether extents and strides (dim(d) -> {extent, stride}, strides in units of `unit`: 1 for DLPack's
// elements, the item size for __cuda_array_interface__'s bytes) describe one C-contiguous range.
template <class Dim>
bool c_contiguous(size_t ndim, int64_t unit, Dim dim) {
  int64_t expect = unit;
  for (size_t d = ndim; d-- > 0;) {
    const auto [extent, stride] = dim(d);
    if (extent != 1 && stride != expect) return false;
    expect *= extent;
  }
  return true;
}

const char* const kMemKindNames[] = {"host", "pinned", "device", "managed"};  // enum accio_mem_kind

// A contiguous view of any Python buffer, kept alive while used. Device objects are recognised
// first, before the buffer protocol (whose export CuPy makes raise), and their producer's stream is
// honoured before accio touches the memory:
//  1. __dlpack_device__ reporting CUDA or CUDA-managed memory: DLPack. accio calls
//     __dlpack__(stream=1, max_version=...) itself, with the array's GPU current: the producer makes
//     the legacy default stream wait for its work, and accio synchronizes that stream, so the memory
//     is ready for any stream accio copies on. Producers that predate max_version or stream are asked
//     again without them (stream None means the legacy default stream too).
//  2. __cuda_array_interface__ (v3; v2 has no stream): its stream (1 legacy, 2 per-thread, else a
//     CUstream handle) is synchronized; absent or None means the data is ready; 0 is refused.
//  3. the buffer protocol (host memory).
//  4. DLPack on the CPU (PyTorch CPU tensors; pinned ones report CUDA-host memory, kDLCUDAHost,
//     and are host memory too: no stream, as PyTorch's own consumer asks).
// The engine then sees where the pointer lives and picks a host or device mechanism.
class View;
// A HeldView given where a buffer is expected (accio.write checks its data that way before it
// truncates the file): its view, shared, without a second export or stream synchronization.
bool view_of_held(nb::handle obj, bool writable, View& into);

class View {
 public:
  View(nb::handle obj, bool writable) {
    try {
      init(obj, writable);
    } catch (nb::python_error& refused) {
      // PyTorch before 2.10 exports no float8 tensor, by DLPack ("float8 types are not supported by
      // dlpack": RuntimeError, later BufferError) or by __cuda_array_interface__ (no typestr): its
      // uint8 view is the same memory, which accio moves as bytes.
      if (!refused.matches(PyExc_BufferError) && !refused.matches(PyExc_RuntimeError)) throw;
      nb::object bytes = torch_bytes_view(obj);
      if (!bytes.is_valid()) throw;
      reset();
      bytes_view_ = bytes;
      try {
        init(bytes_view_, writable);
      } catch (nb::python_error&) {
        throw refused;  // the tensor's own refusal says more than its view's
      }
    }
  }
  ~View() {
    if (have_view_) PyBuffer_Release(&view_);
  }
  View(const View&) = delete;
  View& operator=(const View&) = delete;
  void* ptr() const { return ptr_; }
  size_t size() const { return size_; }
  // The GPU ordinal for memory that came as a CUDA object (DLPack or __cuda_array_interface__), else -1.
  int device() const { return device_; }
  // Whether the producer said the memory is CUDA-pinned host memory (DLPack kDLCUDAHost).
  bool pinned() const { return pinned_; }

 private:
  // Back to nothing taken, after a refused first attempt.
  void reset() {
    if (have_view_) PyBuffer_Release(&view_);
    have_view_ = false;
    held_ = detached_ = array_keep_ = nb::object();
    array_ = nb::ndarray<nb::ro>();
    ptr_ = nullptr;
    size_ = 0;
    device_ = -1;
    pinned_ = false;
  }

  // The module if the program imported it already (a buffer of its type can exist only then), else
  // nothing: never an import of its own.
  static nb::object imported(const char* name) {
    PyObject* m = PyImport_GetModule(nb::str(name).ptr());  // new reference, or NULL
    if (!m) {
      PyErr_Clear();
      return {};
    }
    return nb::steal(m);
  }

  // obj.reshape(-1).view(numpy.uint8) for a C-contiguous NumPy array that holds no Python objects (a
  // view, never a copy: a copy read into would lose the bytes), else nothing.
  static nb::object numpy_bytes_view(nb::handle obj) {
    nb::object mod = imported("numpy");
    if (!mod.is_valid()) return {};
    try {
      if (!nb::isinstance(obj, mod.attr("ndarray"))) return {};
      if (!truth(obj.attr("flags").attr("c_contiguous")) || truth(obj.attr("dtype").attr("hasobject"))) return {};
      return obj.attr("reshape")(-1).attr("view")(mod.attr("uint8"));
    } catch (nb::python_error& e) {  // NumPy refuses the view: no view; KeyboardInterrupt, MemoryError: raised
      if (e.matches(PyExc_TypeError) || e.matches(PyExc_ValueError) || e.matches(PyExc_AttributeError)) return {};
      throw;
    }
  }

  // obj.view(torch.uint8) for a PyTorch tensor of one-byte elements (its class from the torch package,
  // torch imported, dtype.itemsize 1: float8, float4_e2m1fn_x2), else nothing.
  static nb::object torch_bytes_view(nb::handle obj) {
    nb::handle type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
    nb::object mod = imported("torch");
    if (!mod.is_valid()) return {};
    try {
      const std::string from = nb::cast<std::string>(nb::str(type.attr("__module__")));
      if (from != "torch" && from.rfind("torch.", 0) != 0) return {};
      if (nb::cast<long>(obj.attr("dtype").attr("itemsize")) != 1) return {};
      return obj.attr("view")(mod.attr("uint8"));
    } catch (const std::exception&) {
      return {};
    }
  }

  void init(nb::handle obj, bool writable) {
    PyObject* o = obj.ptr();
    if (view_of_held(obj, writable, *this)) return;
    if (PyBytes_CheckExact(o) || PyByteArray_CheckExact(o) || PyMemoryView_Check(o)) {
      from_buffer(obj, writable);
      return;
    }
    // A tensor that requires grad (a model's nn.Parameter) refuses DLPack and CAI export ("use
    // tensor.detach()"); its detach() is the same storage, which is what accio reads into or writes
    // from (as load_state_dict copies into parameters under no_grad).
    if (has(obj, "requires_grad") && has(obj, "detach") && truth(obj.attr("requires_grad"))) {
      detached_ = obj.attr("detach")();
      obj = detached_;
      o = obj.ptr();
    }
    bool dlpack_cpu = false;
    if (has(obj, "__dlpack_device__")) {
      int type = 0, id = 0;
      nb::object dev = obj.attr("__dlpack_device__")();
      try {
        type = nb::cast<int>(dev[0]);
        id = nb::cast<int>(dev[1]);
      } catch (const std::exception&) {
        throw nb::type_error((what(obj) + ".__dlpack_device__() returned " + what(dev) +
                              ", not a (device_type, device_id) pair").c_str());
      }
      if (dlpack_is_cuda(type)) {
        from_dlpack_cuda(obj, id, writable);
        return;
      }
      if (!dlpack_is_host(type) && !has(obj, "__cuda_array_interface__"))
        throw nb::type_error((what(obj) + " lives on DLPack device type " + std::to_string(type) +
                              ", which accio cannot address (it takes host memory and CUDA memory: DLPack "
                              "device types 1 CPU, 2 CUDA, 3 CUDA host, 13 CUDA managed)").c_str());
      dlpack_cpu = dlpack_is_host(type);
      pinned_ = type == nb::device::cuda_host::value;
    }
    if (has(obj, "__cuda_array_interface__")) {
      from_cai(obj, writable);
      return;
    }
    if (PyObject_CheckBuffer(o)) {
      if (!dlpack_cpu || !has(obj, "__dlpack__")) {
        from_buffer(obj, writable);
        return;
      }
      try {  // a CPU DLPack array whose buffer export refuses: its DLPack export may not
        from_buffer(obj, writable);
        return;
      } catch (nb::python_error& buffer_refused) {
        try {
          from_dlpack_host(obj, writable);
          return;
        } catch (nb::python_error& dlpack_refused) {  // both refuse (NumPy's datetime64): one TypeError
          if (!dlpack_refused.matches(PyExc_BufferError)) throw;
          // A NumPy array of a dtype neither export carries (ml_dtypes' bfloat16, float8, int4, which
          // accio.safetensors itself returns; datetime64): its uint8 view is the same memory.
          if (nb::object bytes = numpy_bytes_view(obj); bytes.is_valid()) {
            bytes_view_ = bytes;
            from_buffer(bytes_view_, writable);
            return;
          }
          throw nb::type_error((what(obj) + " cannot give accio its memory: its buffer export says \"" +
                                message(buffer_refused) + "\" and its DLPack export \"" +
                                message(dlpack_refused) + "\" (" + kAccepted + ")").c_str());
        }
      }
    }
    if (dlpack_cpu || has(obj, "__dlpack__")) {
      from_dlpack_host(obj, writable);
      return;
    }
    throw nb::type_error(("expected a buffer, got " + what(obj) + ": " + kAccepted).c_str());
  }

 private:
  // Whether obj has the attribute: only AttributeError means no (nb::hasattr swallowed every
  // exception: a KeyboardInterrupt, or a bug in a tensor class's property, became "expected a buffer").
  static bool has(nb::handle obj, const char* name) {
    PyObject* v = PyObject_GetAttrString(obj.ptr(), name);
    if (v) {
      Py_DECREF(v);
      return true;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) throw nb::python_error();
    PyErr_Clear();
    return false;
  }

  // A Python exception's message alone (str of its value), for quoting inside accio's own.
  static std::string message(nb::python_error& e) {
    try {
      return nb::str(e.value()).c_str();
    } catch (...) {
      return e.what();
    }
  }

  // Whether a struct-module format has Python objects among its items ('O', outside the ':name:'
  // of a structured field): such memory holds pointers with reference counts, not data.
  static bool holds_objects(const char* format) {
    for (bool name = false; format && *format; ++format) {
      if (*format == ':') name = !name;
      else if (!name && *format == 'O') return true;
    }
    return false;
  }

  void from_buffer(nb::handle obj, bool writable) {
    const int flags = PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      nb::python_error refused;  // takes the exception: the probe below must not see it
      Py_buffer ro;
      // A read-only buffer (bytes, a read-only array or mmap) as a read target: a TypeError saying
      // so, as documented, not the exporter's bare BufferError ("Object is not writable").
      if (writable && refused.matches(PyExc_BufferError) && PyObject_GetBuffer(obj.ptr(), &ro, PyBUF_ANY_CONTIGUOUS) == 0) {
        PyBuffer_Release(&ro);
        throw nb::type_error(("a read target must be writable: " + what(obj) +
                              " is read-only (a bytearray, a writable NumPy array or memoryview, or an mmap "
                              "opened for writing takes the bytes)").c_str());
      }
      PyErr_Clear();
      // A buffer whose export refuses only contiguity (a strided memoryview): the ValueError accio
      // gives a non-contiguous array, not the exporter's BufferError.
      Py_buffer any;
      if (refused.matches(PyExc_BufferError) && PyObject_GetBuffer(obj.ptr(), &any, PyBUF_STRIDES) == 0) {
        PyBuffer_Release(&any);
        throw nb::value_error((what(obj) + " is not contiguous: accio moves one contiguous range of bytes (make "
                               "a contiguous copy first, e.g. bytes(view) or ascontiguousarray())").c_str());
      }
      PyErr_Clear();
      throw refused;
    }
    // A NumPy array of dtype object (or ctypes py_object) exports its PyObject pointers: file bytes
    // read over them crashed the interpreter at the array's next decref, and a write stored addresses.
    if (holds_objects(view_.format)) {
      const std::string text = what(obj) + " holds Python objects (buffer format '" + view_.format +
                               "'), which are pointers, not data: accio moves arrays of numbers or bytes";
      PyBuffer_Release(&view_);  // a constructor that throws runs no destructor
      throw nb::type_error(text.c_str());
    }
    have_view_ = true;
    ptr_ = view_.buf;
    size_ = static_cast<size_t>(view_.len);
  }

  static bool truth(nb::handle v) {
    const int t = PyObject_IsTrue(v.ptr());
    if (t < 0) throw nb::python_error();
    return t == 1;
  }

  // obj.__dlpack__() as the array API asks: max_version, and stream=1 (the legacy default stream)
  // for GPU memory (none for host memory, pinned included, as PyTorch's own consumer does); a producer that refuses a keyword with TypeError is asked again with fewer
  // (before DLPack 1.0: no max_version; with no stream keyword at all it assumes the legacy stream).
  static nb::object call_dlpack(nb::handle obj, bool cuda) {
    nb::object fn = obj.attr("__dlpack__");
    const nb::object version = nb::make_tuple(nb::dlpack::major_version, nb::dlpack::minor_version);
    const int attempts = cuda ? 3 : 2;
    for (int attempt = 0;; ++attempt) {
      try {
        if (attempt == 0) return cuda ? fn("stream"_a = 1, "max_version"_a = version) : fn("max_version"_a = version);
        if (attempt == 1 && cuda) return fn("stream"_a = 1);
        return fn();
      } catch (nb::python_error& e) {
        if (attempt == attempts - 1 || !e.matches(PyExc_TypeError)) throw;
      }
    }
  }

  // Takes a DLPack capsule (or anything nanobind imports) as the array; checks writability and layout.
  void take_dlpack(nb::handle obj, nb::handle cap, bool writable, bool cuda) {
    nb::ndarray<> rw;
    if (writable ? !nb::try_cast(cap, rw, false) : !nb::try_cast(cap, array_, false)) {
      nb::ndarray<nb::ro> ro;
      if (writable && nb::try_cast(cap, ro, false))
        throw nb::type_error((what(obj) + " is read-only (its DLPack export says so): read into a writable "
                              "array").c_str());  // TypeError, as for every read-only read target
      throw nb::type_error((what(obj) + ".__dlpack__() returned a " + what(cap) +
                            " that is not a DLPack capsule accio can import: " + kAccepted).c_str());
    }
    if (writable) array_ = nb::ndarray<nb::ro>(rw);
    // A GPU array may export CUDA-host memory (the engine tells pinned memory from the pointer, as it
    // did before kDLCUDAHost objects went the host way); a host one must not export GPU memory.
    const int dt = array_.device_type();
    if (cuda ? !dlpack_is_cuda(dt) && dt != nb::device::cuda_host::value : !dlpack_is_host(dt))
      throw nb::type_error((what(obj) + "'s DLPack export lives on device type " + std::to_string(dt) +
                            ", not what its __dlpack_device__() said").c_str());
    bool empty = false;
    for (size_t d = 0; d < array_.ndim(); ++d) empty |= array_.shape(d) == 0;
    const auto dim = [&](size_t d) { return std::pair(static_cast<int64_t>(array_.shape(d)), array_.stride(d)); };
    if (!empty && !c_contiguous(array_.ndim(), 1, dim))
      throw nb::value_error((what(obj) + " is not C-contiguous: accio moves one contiguous range of "
                             "bytes (make a contiguous copy first, e.g. .contiguous() or "
                             "ascontiguousarray())").c_str());
    ptr_ = const_cast<void*>(static_cast<const void*>(array_.data()));
    // bits x lanes per element: PyTorch (2.10+) exports float4_e2m1fn_x2, one byte of two 4-bit
    // values, as bits 4 and lanes 2, and nanobind's nbytes() leaves the lanes out (half the bytes).
    // An element that is not whole bytes (a packed sub-byte type) has no byte range to move.
    const nb::dlpack::dtype t = array_.dtype();
    const size_t bits = size_t{t.bits} * t.lanes;
    if (bits == 0 || bits % 8)
      throw nb::type_error((what(obj) + "'s DLPack export has elements of " + std::to_string(t.bits) + " bits x " +
                            std::to_string(t.lanes) + " lanes (type code " + std::to_string(t.code) +
                            "), not whole bytes: accio moves byte ranges (pass a uint8 view of the same "
                            "memory, e.g. .view(torch.uint8))").c_str());
    if (array_.size() > SIZE_MAX / (bits / 8))
      throw nb::value_error((what(obj) + "'s DLPack export is larger than the address space").c_str());
    size_ = array_.size() * (bits / 8);
  }

  void from_dlpack_cuda(nb::handle obj, int id, bool writable) {
    if (!has(obj, "__dlpack__"))
      throw nb::type_error((what(obj) + " has __dlpack_device__ but no __dlpack__: " + kAccepted).c_str());
    device_ = id;
    // stream=1: the legacy default stream (of the array's GPU, current for the export), which accio
    // synchronizes below.
    take_dlpack(obj, on_device(id, [&] { return call_dlpack(obj, true); }), writable, true);
    sync_stream(id, 1);
  }

  void from_dlpack_host(nb::handle obj, bool writable) {
    // __dlpack__() called here (no stream: CPU memory has none), so that a producer's refusal (a
    // tensor that requires grad: "use tensor.detach()") reaches the caller as it was raised.
    take_dlpack(obj, call_dlpack(obj, false), writable, false);
  }

  void from_cai(nb::handle obj, bool writable) {
    nb::object iface = obj.attr("__cuda_array_interface__");
    const std::string name = what(obj);
    if (!PyDict_Check(iface.ptr()))
      throw nb::type_error((name + ".__cuda_array_interface__ is a " + what(iface) + ", not a dict").c_str());
    nb::dict cai = nb::borrow<nb::dict>(iface);
    auto bad = [&](const std::string& why) {
      return nb::type_error((name + ".__cuda_array_interface__: " + why).c_str());
    };
    for (const char* key : {"data", "shape", "typestr"})
      if (!cai.contains(key)) throw bad(std::string("no '") + key + "' entry");
    if (cai.contains("mask") && !cai["mask"].is_none())
      throw nb::value_error((name + " is a masked array (__cuda_array_interface__ mask is set): accio moves "
                             "plain bytes; pass the unmasked data").c_str());
    uintptr_t ptr;
    bool readonly;
    std::vector<int64_t> shape;
    size_t item;
    std::optional<uintptr_t> stream;
    try {
      nb::object data = cai["data"];
      ptr = nb::cast<uintptr_t>(data[0]);
      readonly = nb::cast<bool>(data[1]);
      for (nb::handle d : nb::borrow<nb::object>(cai["shape"])) shape.push_back(nb::cast<int64_t>(d));
      const std::string t = nb::cast<std::string>(cai["typestr"]);
      if (t.size() < 3 || t.find_first_not_of("0123456789", 2) != std::string::npos) throw bad("typestr " + t);
      item = std::stoul(t.substr(2));
      if (cai.contains("stream") && !cai["stream"].is_none()) {
        nb::object s = cai["stream"];
        if (PyBool_Check(s.ptr()) || !PyLong_Check(s.ptr())) throw bad("stream is a " + what(s) + ", not an int");
        const auto v = nb::cast<int64_t>(s);
        if (v == 0)
          throw nb::value_error((name + ".__cuda_array_interface__ has stream 0, which CAI v3 disallows "
                                 "(ambiguous): the producer should give 1 for the legacy default stream, 2 for "
                                 "the per-thread default stream, a stream handle, or None").c_str());
        if (v < 0) throw bad("stream " + std::to_string(v) + " is negative");
        stream = static_cast<uintptr_t>(v);
      }
    } catch (const nb::builtin_exception&) {
      throw;
    } catch (const std::exception& e) {  // a failed cast, or a Python error indexing the entries
      throw bad(std::string("malformed (") + e.what() + "); expected data=(pointer, read_only), shape=tuple, "
                "typestr like '<f4'");
    }
    if (writable && readonly)
      throw nb::type_error(("the device array is read-only (" + name +
                            ".__cuda_array_interface__ data is (pointer, True)): read into a writable array").c_str());
    size_t n = 1;  // elements; an overflowing product (2**32 x 2**32) was a 0-byte buffer that "read" 0
    bool overflow = false, empty = false;
    for (int64_t e : shape) {
      if (e < 0) throw bad("negative extent in shape");
      empty |= e == 0;
      overflow |= __builtin_mul_overflow(n, static_cast<size_t>(e), &n);
    }
    size_t bytes = 0;
    if (empty) n = 0;
    else if (overflow || __builtin_mul_overflow(n, item, &bytes) || bytes > static_cast<size_t>(PTRDIFF_MAX))
      throw bad("the shape's size in bytes overflows");
    if (cai.contains("strides") && !cai["strides"].is_none() && n > 0) {
      nb::object strides = cai["strides"];
      if (nb::len(strides) != shape.size()) throw bad("strides and shape differ in length");
      if (!c_contiguous(shape.size(), static_cast<int64_t>(item),
                        [&](size_t d) { return std::pair(shape[d], nb::cast<int64_t>(strides[d])); }))
        throw nb::value_error((name + " is not C-contiguous (__cuda_array_interface__ strides): accio moves "
                               "one contiguous range of bytes; make a contiguous copy first").c_str());
    }
    // CUDA memory cannot exist without a CUDA driver: the pointer, taken for host memory, crashed
    // the CPU copies of realign and direct (python API audit, session 26).
    char why[512];
    if (n > 0 && accio_cuda_available(why, sizeof why) != 1)
      throw accio::Error(ENODEV, writable ? "read" : "write", "", -1, name + " gives CUDA memory (__cuda_array_interface__), and there is no "
                                                 "CUDA driver to address it: " + why + " (errno 19)");
    array_keep_ = nb::borrow(obj);
    ptr_ = reinterpret_cast<void*>(ptr);
    size_ = n * item;
    int dev = -1;
    if (size_ > 0) accio_mem_kind(ptr_, &dev);
    device_ = dev < 0 ? 0 : dev;
    // Nothing to wait for without a stream (or without bytes to touch).
    if (stream && size_ > 0) sync_stream(device_, *stream);
  }

  friend bool view_of_held(nb::handle obj, bool writable, View& into);
  Py_buffer view_{};
  bool have_view_ = false;
  nb::object held_;            // a HeldView whose view this one is
  nb::ndarray<nb::ro> array_;  // a DLPack import: holds the producer's memory until released
  nb::object detached_;         // the detach() of a tensor that requires grad, kept while its memory is used
  nb::object bytes_view_;       // the uint8 view of a tensor that exports no memory of its dtype
  nb::object array_keep_;      // a __cuda_array_interface__ object
  void* ptr_ = nullptr;
  size_t size_ = 0;
  int device_ = -1;
  bool pinned_ = false;
};

// GPU memory that accio allocated (cuMemAlloc, or cuMemAllocManaged): what accio.read(path,
// device="cuda:N") returns when CuPy is not installed. Exposes __cuda_array_interface__ and DLPack,
// so cupy.asarray(a), torch.from_dlpack(a) and numba take it without a copy.
class DeviceArray {
 public:
  DeviceArray(size_t nbytes, int device, bool managed) : size_(nbytes), device_(device), managed_(managed) {
    accio::detail::check(accio_device_alloc(device, nbytes, managed, &ptr_));
  }
  ~DeviceArray() { accio_device_free(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  uintptr_t ptr() const { return reinterpret_cast<uintptr_t>(ptr_); }
  size_t nbytes() const { return size_; }
  int device() const { return device_; }
  bool managed() const { return managed_; }
  nb::dict cai() const {
    nb::dict d;
    d["shape"] = nb::make_tuple(size_);
    d["typestr"] = "|u1";
    d["data"] = nb::make_tuple(ptr(), false);
    d["strides"] = nb::none();
    d["version"] = 3;
    return d;
  }
  nb::bytes to_bytes() const {
    std::string out(size_, '\0');
    accio::detail::check(accio_device_copy(out.data(), ptr_, size_));
    return nb::bytes(out.data(), out.size());
  }
  void copy_from(nb::handle src) {
    View v(src, false);
    if (v.size() != size_) throw nb::value_error("size mismatch");
    nb::gil_scoped_release nogil;
    accio::detail::check(accio_device_copy(ptr_, v.ptr(), size_));
  }
  void* raw() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t size_;
  int device_;
  bool managed_;
};

// A buffer held, export and all, for as long as this object lives: for callers that hand its address
// to something that uses it later (the offload runtime), so that a bytearray cannot resize nor an
// mmap close under it. where: host for buffer-protocol and plain CPU DLPack objects, else (CUDA-host
// DLPack objects too) what the driver says (pinned, device, managed).
class HeldView {
 public:
  HeldView(nb::handle obj, bool writable) : v_(obj, writable), writable_(writable) {
    if (v_.device() >= 0 || v_.pinned()) kind_ = accio_mem_kind(v_.ptr(), &dev_);
  }
  uintptr_t address() const { return reinterpret_cast<uintptr_t>(v_.ptr()); }
  size_t nbytes() const { return v_.size(); }
  std::string where() const { return kMemKindNames[kind_]; }
  int device() const { return dev_; }

 private:
  friend bool view_of_held(nb::handle obj, bool writable, View& into);
  View v_;
  bool writable_;
  int kind_ = ACCIO_MEM_HOST;
  int dev_ = -1;
};

bool view_of_held(nb::handle obj, bool writable, View& into) {
  HeldView* h = nullptr;
  if (!nb::try_cast(obj, h, false) || !h) return false;
  if (writable && !h->writable_)
    throw nb::type_error("a read target must be writable: this HeldView was made read-only");
  into.ptr_ = h->v_.ptr_;
  into.size_ = h->v_.size_;
  into.device_ = h->v_.device_;
  into.pinned_ = h->v_.pinned_;
  into.held_ = nb::borrow(obj);
  return true;
}

// Pinned host memory (accio_host_alloc) with the buffer protocol (memoryview(b), numpy.frombuffer(b)),
// freed when the object and every view of it are gone. pinned: how the pages are held ("cuda":
// registered with the CUDA driver, "mlock", or "pageable" when neither was allowed).
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t nbytes) : size_(nbytes) {
    int how = ACCIO_HOST_PAGEABLE;
    if (nbytes == 0) return;  // empty, as numpy.empty(0) and torch's pinned empty(0) are: nothing to pin
    {
      nb::gil_scoped_release nogil;  // mapping and faulting in gigabytes takes a while
      accio::detail::check(accio_host_alloc(nbytes, &ptr_, &how));
    }
    how_ = how;
  }
  ~PinnedBuffer() { accio_host_free(ptr_); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  size_t nbytes() const { return size_; }
  uintptr_t address() const { return reinterpret_cast<uintptr_t>(ptr_); }
  const char* pinned() const {
    return how_ == ACCIO_HOST_CUDA ? "cuda" : how_ == ACCIO_HOST_MLOCK ? "mlock" : "pageable";
  }
  static int get_buffer(PyObject* self, Py_buffer* view, int flags) {
    PinnedBuffer* b = nb::inst_ptr<PinnedBuffer>(self);
    return PyBuffer_FillInfo(view, self, b->ptr_, static_cast<Py_ssize_t>(b->size_), 0, flags);
  }

 private:
  void* ptr_ = nullptr;
  size_t size_;
  int how_ = ACCIO_HOST_PAGEABLE;
};

PyType_Slot kPinnedSlots[] = {{Py_bf_getbuffer, reinterpret_cast<void*>(&PinnedBuffer::get_buffer)}, {0, nullptr}};

// The Python exception for an accio error: accio._errors.from_native (an accio.Error that is also the
// matching OSError subclass).
nb::object python_error(const accio::Error& e) {
  nb::object make = nb::module_::import_("accio._errors").attr("from_native");
  // A path's bytes as os.fsdecode gives them back (surrogateescape): a name that is not UTF-8 made
  // the error itself fail.
  auto text = [](const std::string& t) {
    PyObject* u = PyUnicode_DecodeFSDefaultAndSize(t.data(), static_cast<Py_ssize_t>(t.size()));
    if (!u) throw nb::python_error();
    return nb::steal(u);
  };
  return make(e.errnum(), text(e.op()), text(e.path()), e.offset(), text(e.what()));
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

// ---- accio.Future, settled when its request completes ----
// PyFuture::notify registers an engine completion callback for the accio.Future around the request
// (accio._futures). Until someone must be told of the outcome, the callback takes no GIL: it marks
// the request complete (deferred) and the outcome is stored in the accio.Future when a thread looks
// (result(), done(), or anything concurrent.futures does, all of which observe() first), so a worker
// never waits for the GIL while nobody listens. Once observed (a waiter in wait()/as_completed(),
// add_done_callback, `await`), the callback settles the future on the worker that completed the
// request: it takes the GIL, sets the result or the exception (waking the waiters, running the
// callbacks) and releases the buffer, so no thread polls. At exit futures_drain (atexit) stops
// taking observed callbacks and waits for those in flight, so that no worker enters the interpreter
// once it is finalizing; a future observed after that is waited for by the thread that observes it.
struct Pending {
  std::mutex mu;
  std::condition_variable cv;
  size_t count = 0;     // observed futures whose callbacks have not finished
  bool closed = false;  // futures_drain ran
};
Pending* g_pending = new Pending;  // leaked: workers may finish after static destruction
// How many forks led to this process (the engine's base::fork_count, which the C API does not
// export): state counted under an older value belongs to a parent's threads, absent here.
std::atomic<unsigned> g_forks{0};

// Interned attribute names of concurrent.futures.Future and its FINISHED state (made on first use).
struct FutureNames {
  PyObject *condition, *state, *result, *exception, *finished;
};
const FutureNames& future_names() {  // GIL held
  static const FutureNames names = [] {
    nb::object finished = nb::module_::import_("concurrent.futures._base").attr("FINISHED");
    return FutureNames{PyUnicode_InternFromString("_condition"), PyUnicode_InternFromString("_state"),
                       PyUnicode_InternFromString("_result"), PyUnicode_InternFromString("_exception"),
                       finished.release().ptr()};
  }();
  return names;
}

// The GIL for a completion callback. An engine worker is a thread Python does not know: the first
// time, it makes a thread state and keeps it (one PyGILState_Ensure more than it releases), so later
// callbacks there do not create and destroy one each (microseconds). On a Python thread (a callback
// run at once by the registering thread) it is a plain PyGILState_Ensure.
class CallbackGil {
 public:
  CallbackGil() {
    if (!PyGILState_GetThisThreadState()) {
      PyGILState_Ensure();
      PyEval_SaveThread();
    }
    state_ = PyGILState_Ensure();
  }
  ~CallbackGil() { PyGILState_Release(state_); }
  CallbackGil(const CallbackGil&) = delete;
  CallbackGil& operator=(const CallbackGil&) = delete;

 private:
  PyGILState_STATE state_;
};

// The result of read_into_async / write_from_async; holds the buffer until the request is done.
class PyFuture {
 public:
  PyFuture(accio::Future f, std::unique_ptr<View> v) : fut_(std::move(f)), view_(std::move(v)) {}
  // Dropping a future whose request runs waits for it (the request writes into the buffer this
  // holds), and for its callback: before anything else here goes. A completed one waits for the
  // GIL-free part of a callback at most (an observed future's callback holds owner, which holds
  // this, until it has given up the GIL), so the GIL is kept then.
  ~PyFuture() {
    if (!fut_.valid()) return;
    if (fut_.ready(0)) {
      fut_ = accio::Future();
      return;
    }
    nb::gil_scoped_release nogil;
    fut_ = accio::Future();
  }
  size_t result(std::optional<double> timeout) {
    if (timeout) {
      bool ok;
      {
        nb::gil_scoped_release nogil;
        ok = fut_.ready(static_cast<int64_t>(*timeout * 1e9));
      }
      if (!ok) {
        nb::object te = nb::module_::import_("builtins").attr("TimeoutError");
        PyErr_SetString(te.ptr(), "request still running");
        throw nb::python_error();
      }
    }
    size_t n;
    {
      nb::gil_scoped_release nogil;
      n = fut_.get();
    }
    view_.reset();
    return n;
  }
  bool done() {
    nb::gil_scoped_release nogil;
    return fut_.ready(0);
  }

  // ---- for accio.Future (owner) ----
  // Registers the completion callback; owner is the accio.Future holding this (not referenced: it
  // outlives this, but while observed the callback holds a reference).
  void notify(nb::handle owner) {
    owner_ = owner.ptr();
    fut_.on_complete([this](const accio::Completion&) { completed(); });
  }
  // Someone must be told of owner's outcome (concurrent.futures made its Condition): from now on the
  // callback settles owner; if the request completed already, owner is settled here and now.
  void observe() {
    // Complete (a parent's request in a forked child is, with ECANCELED) and not observed yet: no
    // callback will come for it here, so it is neither counted nor held. Observed already, the
    // callback settles it: settling here could run concurrent.futures' callbacks in the middle of
    // add_done_callback, between its check of the state and its append.
    if (phase_.load() != kObserved && fut_.ready(0)) {
      settle();
      return;
    }
    Pending& p = *g_pending;
    bool closed;
    {
      std::lock_guard lk(p.mu);
      closed = p.closed;
      if (!closed) ++p.count;  // before the callback can see kObserved
    }
    int phase = closed ? phase_.load() : kRunning;
    if (!closed) {
      if (phase_.compare_exchange_strong(phase, kObserved)) {
        Py_INCREF(owner_);  // until the callback: a future nobody holds still runs its callbacks
        return;
      }
      finished(p);  // not counted after all: the callback will not enter Python
    }
    if (phase == kObserved) return;  // by another thread, first
    if (phase == kRunning) {  // exiting: no worker may enter the interpreter now, so wait here. With
      // the GIL (this request needs none): a daemon thread that let go of it could not take it back.
      accio_future_wait(fut_.handle());
    }
    settle();
  }
  // Waits up to timeout seconds (None: as long as it takes; the GIL released) for the request and
  // settles owner (unless settled already); false when the time ran out first.
  // Waited for in slices, the signal handlers run between them: Ctrl-C stops result() as it stops
  // concurrent.futures' (one uninterrupted wait held it until the request completed).
  bool wait(std::optional<double> timeout) {
    const bool bounded = timeout && *timeout < 1e9;
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::nanoseconds(bounded ? static_cast<int64_t>(*timeout * 1e9) : 0);
    while (!fut_.ready(0)) {
      int64_t slice = 100'000'000;
      if (bounded) {
        const int64_t left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now()).count();
        if (left <= 0) return false;
        slice = std::min(slice, left);
      }
      bool ok;
      {
        nb::gil_scoped_release nogil;
        ok = fut_.ready(slice);
      }
      if (ok) break;
      if (PyErr_CheckSignals() != 0) throw nb::python_error();  // KeyboardInterrupt, or a handler's own
    }
    settle();
    return true;
  }
  // Settles owner if the request has completed; whether it has.
  bool poll() {
    if (!fut_.ready(0)) return false;
    settle();
    return true;
  }

 private:
  enum Phase : int { kRunning, kDeferred, kObserved };

  // The engine's callback: on the worker that completed the request, or on the registering thread.
  void completed() {
    int phase = kRunning;
    if (phase_.compare_exchange_strong(phase, kDeferred)) return;  // settled when someone looks
    Pending& p = *g_pending;
    if (!finalizing()) {  // else the interpreter is gone (no drain at exit): owner is left as it is
      CallbackGil gil;
      settle();
      Py_DECREF(owner_);  // may free owner, and this with it
    }
    finished(p);
  }
  static void finished(Pending& p) {
    std::lock_guard lk(p.mu);
    if (--p.count == 0) p.cv.notify_all();
  }
  // Records the request's outcome in owner (a concurrent.futures.Future; GIL held) unless it is
  // settled already (the callback, wait() and poll() may all try), and lets go of the buffer. With no
  // _condition yet nobody waits on owner and it has no callbacks (both need the condition first):
  // the outcome is stored as set_result would store it, with no Python code run in between (so no
  // other thread can make the condition meanwhile). Otherwise owner._settle calls set_result or
  // set_exception, which take the condition, tell the waiters and run the callbacks.
  void settle() {
    try {
      const FutureNames& n = future_names();
      const nb::object d = nb::steal(PyObject_GenericGetDict(owner_, nullptr));
      if (!d) throw nb::python_error();
      if (PyDict_GetItemWithError(d.ptr(), n.state) != n.finished) {
        nb::object outcome;
        bool ok = true;
        try {
          outcome = nb::int_(accio::Completion(fut_.handle(), accio_future_wait(fut_.handle())).get());
        } catch (const accio::Error& e) {
          outcome = python_error(e);
          ok = false;
        }
        const int waited = PyDict_Contains(d.ptr(), n.condition);
        if (waited < 0) throw nb::python_error();
        if (!waited) {
          if (PyDict_SetItem(d.ptr(), ok ? n.result : n.exception, outcome.ptr()) != 0 ||
              PyDict_SetItem(d.ptr(), n.state, n.finished) != 0)
            throw nb::python_error();
        } else {
          nb::handle(owner_).attr("_settle")(outcome, ok);
        }
      }
    } catch (nb::python_error& e) {
      e.discard_as_unraisable("accio: settling a Future");
    } catch (const std::exception& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
      PyErr_WriteUnraisable(owner_);
    }
    view_.reset();
  }

  accio::Future fut_;
  std::unique_ptr<View> view_;
  PyObject* owner_ = nullptr;
  std::atomic<int> phase_{kRunning};
};

void futures_drain() {
  nb::gil_scoped_release nogil;  // the callbacks in flight need the GIL
  Pending& p = *g_pending;
  std::unique_lock lk(p.mu);
  p.closed = true;
  p.cv.wait(lk, [&] { return p.count == 0; });
}

// The Python end of accio_set_log_callback: accio._log._emit (warnings and logging). It never
// blocks: a message issued on a thread that holds the GIL goes out at once; one from any other
// thread (an engine worker, while a Python thread may hold the GIL and wait for that worker) is
// queued and delivered by a pending call on the main thread. The sink object is leaked on purpose
// (never destroyed after the interpreter); the package puts the C default back at exit (atexit).
nb::object* g_log_sink = nullptr;
struct LogMessage {
  int level;
  std::string key, msg;
};
std::mutex g_log_mu;
std::vector<LogMessage> g_log_queue;  // guarded by g_log_mu
bool g_log_drain_pending = false;     // guarded by g_log_mu

void emit_python(const LogMessage& m) {  // GIL held
  if (!g_log_sink || !g_log_sink->is_valid()) return;
  try {
    (*g_log_sink)(m.level, m.key, m.msg);
  } catch (nb::python_error& e) {  // e.g. a warnings filter set to "error": nowhere to raise it
    e.discard_as_unraisable("accio log sink");
  }
}

int drain_log(void*) {  // a pending call: the main thread, GIL held
  std::vector<LogMessage> q;
  {
    std::lock_guard lk(g_log_mu);
    q.swap(g_log_queue);
    g_log_drain_pending = false;
  }
  for (const LogMessage& m : q) emit_python(m);
  return 0;
}

void log_to_python(int level, const char* key, const char* msg, void*) {
  if (finalizing()) return;
  if (PyGILState_Check()) {
    drain_log(nullptr);  // keep the order of messages queued before this one
    emit_python({level, key, msg});
    return;
  }
  bool schedule;
  {
    std::lock_guard lk(g_log_mu);
    g_log_queue.push_back({level, key, msg});
    schedule = !g_log_drain_pending;
    g_log_drain_pending = true;
  }
  if (schedule && Py_AddPendingCall(drain_log, nullptr) != 0) {  // the pending-call queue is full
    std::lock_guard lk(g_log_mu);
    g_log_drain_pending = false;  // the next message (or accio._ext.drain_log()) tries again
  }
}

// A path's bytes from str, bytes or os.PathLike, as os.open takes it (PyUnicode_FSConverter: str
// through the filesystem encoding with surrogateescape; ValueError for an embedded NUL).
std::string fs_path(nb::handle path) {
  PyObject* out = nullptr;
  if (!PyUnicode_FSConverter(path.ptr(), &out)) throw nb::python_error();
  const nb::object bytes = nb::steal(out);
  return std::string(PyBytes_AS_STRING(out), static_cast<size_t>(PyBytes_GET_SIZE(out)));
}

// Text for a C string: a NUL inside was cut there silently (accio.open(q + "\0.tmp", "w") emptied q;
// python API audit, session 26); ValueError as os.open and open() give.
const std::string& no_nul(const std::string& text, const char* what) {
  if (text.find('\0') != std::string::npos) throw nb::value_error((std::string(what) + ": embedded null byte").c_str());
  return text;
}

accio::Settings to_settings(const std::vector<std::pair<std::string, std::string>>& kv) {
  accio::Settings s;
  for (auto& [k, v] : kv) s.set(no_nul(k, "setting name"), no_nul(v, ("setting " + k).c_str()));
  return s;
}

// s: accio_file_stats or accio_global_stats; per_id(id, &calls, &bytes): the matching
// accio_*_mechanism_stats, which knows every mechanism id.
template <class PerId>
nb::dict stats_dict(const accio_stats& s, PerId per_id) {
  nb::dict d;
  d["reads"] = s.reads;
  d["writes"] = s.writes;
  d["fsyncs"] = s.fsyncs;
  d["errors"] = s.errors;
  d["bytes_read"] = s.bytes_read;
  d["bytes_written"] = s.bytes_written;
  d["read_ns"] = s.read_ns;
  d["write_ns"] = s.write_ns;
  d["fsync_ns"] = s.fsync_ns;
  nb::dict per;
  for (int i = 0; i < accio_mechanism_count(); ++i) {
    uint64_t calls = 0, bytes = 0;
    accio::detail::check(per_id(i, &calls, &bytes));
    nb::dict m;
    m["calls"] = calls;
    m["bytes"] = bytes;
    per[accio_mechanism_name(i)] = m;
  }
  d["mechanisms"] = per;
  d["last_mechanism"] = s.last_mechanism >= 0 ? nb::cast(accio_mechanism_name(s.last_mechanism)) : nb::none();
  return d;
}

class PyFile {
  // The calls in progress on this file (each a Use), counted per process. A forked child inherits
  // the count of the parent's calls in progress at the fork, calls of threads that do not exist
  // there and never end: its close() (a with block, a Dataset's cleanup in a DataLoader worker)
  // waited for them for ever. So the child's first look makes a count of its own, and the parent's
  // (whose lock a parent's thread may hold) is leaked.
  struct Users {
    explicit Users(unsigned f) : forks(f) {}
    const unsigned forks;  // g_forks when made
    std::atomic<int> n{0};
    std::mutex mu;
    std::condition_variable cv;
  };
 public:
  // path: str, bytes or os.PathLike, as os.open takes it (a name that is not UTF-8 too).
  PyFile(nb::handle path, const std::string& mode, const std::vector<std::pair<std::string, std::string>>& kv)
      : path_(fs_path(path)), f_(open_file(path_, no_nul(mode, "mode"), to_settings(kv))) {}
  // Closing waits for the requests in flight, whose workers may need the GIL (the log sink).
  ~PyFile() {
    {
      nb::gil_scoped_release nogil;
      try {
        f_.close();
      } catch (...) {  // a close error has no one to go to here; close() reports it
      }
    }
    Users* u = users_.load();
    if (u->forks == g_forks.load()) delete u;  // else a parent's, whose lock a parent's thread may hold
  }
  PyFile(const PyFile&) = delete;
  PyFile& operator=(const PyFile&) = delete;

  // The open without the GIL (on NFS or Lustre an open waits for the metadata server, and one on a
  // FIFO for a writer: other threads ran one open at a time, or not at all), retried after an
  // interrupting signal as CPython retries (PEP 475) unless its handler raised (Ctrl-C:
  // KeyboardInterrupt, not an accio error).
  static accio::File open_file(const std::string& path, const std::string& mode, const accio::Settings& s) {
    for (;;) {
      try {
        nb::gil_scoped_release nogil;
        return accio::File(path, mode, s);
      } catch (const accio::Error& e) {
        if (e.errnum() != EINTR) throw;
      }
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
  }

  // expect: the size the buffer must have (accio.read(out=...)), checked on the view that is read into.
  size_t read_into(nb::handle buf, int64_t offset, std::optional<size_t> expect) {
    Use use(*this, "pread");
    View v(buf, true);
    if (expect && v.size() != *expect)
      throw nb::value_error(("the file has " + std::to_string(*expect) + " bytes, out holds " +
                             std::to_string(v.size()) + "; pass an out of the file's size, or use "
                             "accio.open(path).read_into(out, offset) for part of a file").c_str());
    nb::gil_scoped_release nogil;
    return f_.pread(v.ptr(), v.size(), offset);
  }
  size_t write_from(nb::handle buf, int64_t offset) {
    Use use(*this, "pwrite");
    View v(buf, false);
    nb::gil_scoped_release nogil;
    return f_.pwrite(v.ptr(), v.size(), offset);
  }
  std::pair<int64_t, size_t> append(nb::handle buf) {
    Use use(*this, "append");  // (offset written at, bytes)
    View v(buf, false);
    nb::gil_scoped_release nogil;
    return {f_.append(v.ptr(), v.size()), v.size()};
  }
  PyFuture* async(nb::handle buf, int64_t offset, bool write) {
    Use use(*this, "submit");
    auto v = std::make_unique<View>(buf, !write);
    accio::Future fut;
    {
      nb::gil_scoped_release nogil;
      fut = write ? f_.pwrite_async(v->ptr(), v->size(), offset) : f_.pread_async(v->ptr(), v->size(), offset);
    }
    return new PyFuture(std::move(fut), std::move(v));
  }
  std::vector<PyFuture*> submit(const std::vector<std::pair<nb::handle, int64_t>>& reqs, bool write) {
    Use use(*this, "submit");
    std::vector<std::unique_ptr<View>> views;
    std::vector<accio::Request> rs;
    for (auto& [obj, off] : reqs) {
      views.push_back(std::make_unique<View>(obj, !write));
      rs.push_back({views.back()->ptr(), views.back()->size(), off});
    }
    std::vector<accio::Future> futs;
    {
      nb::gil_scoped_release nogil;
      futs = f_.submit(rs, write ? ACCIO_OP_WRITE : ACCIO_OP_READ);
    }
    std::vector<PyFuture*> out;
    for (size_t i = 0; i < futs.size(); ++i) out.push_back(new PyFuture(std::move(futs[i]), std::move(views[i])));
    return out;
  }
  void fsync() {
    Use use(*this, "fsync");
    nb::gil_scoped_release nogil;
    f_.fsync();
  }
  uint64_t size() {
    Use use(*this, "fstat");
    return f_.size();
  }
  int fileno() {
    Use use(*this, "fileno");
    return accio::detail::check(accio_file_fd(f_.handle()));
  }
  // Waits for the calls of other threads in progress on this file (each holds a Use), then closes:
  // closed under them, the handle they were using was freed (SIGSEGV in stats, read_into, plan,
  // residency). Calls that come after are refused (EBADF naming the call and the file).
  void close() {
    // Python code that runs inside a call on this file (a buffer's __dlpack__ or
    // __cuda_array_interface__ property, the log sink) closing it would wait for ever for the
    // call it runs in.
    if (Use::inside(this))
      throw std::runtime_error("close() of '" + path_ + "' from inside a call on the same file (a buffer property or "
                               "the log sink): close it after the call returns");
    nb::gil_scoped_release nogil;  // the calls waited for may need the GIL to finish
    std::lock_guard<std::mutex> once(close_mu_);  // two threads closing at once: one accio_close
    closed_.store(true);
    {
      Users& u = users();
      std::unique_lock<std::mutex> lk(u.mu);
      u.cv.wait(lk, [&] { return u.n.load() == 0; });
    }
    f_.close();
  }
  bool closed() const { return closed_.load(); }
  std::string plan(size_t n, bool write) {
    Use use(*this, "plan");
    nb::gil_scoped_release nogil;  // may register the file with cuFile
    return f_.plan(n, write ? ACCIO_OP_WRITE : ACCIO_OP_READ);
  }
  nb::dict stats() {
    Use use(*this, "stats");
    accio_file* h = f_.handle();
    nb::dict d = stats_dict(f_.stats(), [h](int id, uint64_t* calls, uint64_t* bytes) {
      return accio_file_mechanism_stats(h, id, calls, bytes);
    });
    nb::list plans;
    for (const accio_plan_stat& p : f_.plans()) {
      nb::dict e;
      e["plan"] = std::string(p.plan);
      e["why"] = std::string(p.why);
      e["calls"] = p.calls;
      e["bytes"] = p.bytes;
      plans.append(e);
    }
    d["plans"] = plans;
    return d;
  }
  std::tuple<std::string, std::string, std::string> explain(size_t n, int64_t offset, bool write, bool aligned) {
    Use use(*this, "explain");
    // An unaligned request is modelled by an odd buffer address; the planner never dereferences it.
    const void* buf = aligned ? nullptr : reinterpret_cast<const void*>(uintptr_t{1});
    const accio_op op = write ? ACCIO_OP_WRITE : ACCIO_OP_READ;
    nb::gil_scoped_release nogil;
    // accio_explain alone: accio_mechanism_for_at is the decision a request makes, and asking it
    // moved the handle's stream and residency state (the next read ran another plan).
    auto e = f_.explain(buf, n, offset, op);
    return {mechanism_of(e.plan), e.plan, e.why};
  }
  // The mechanism a plan's label begins with ("uring+direct(even, qd=16)": uring), the longest name
  // that is followed by nothing, "(" or "+".
  static std::string mechanism_of(const std::string& label) {
    std::string best;
    for (int i = 0; i < accio_mechanism_count(); ++i) {
      const std::string m = accio_mechanism_name(i);
      if (m.size() <= best.size() || label.compare(0, m.size(), m) != 0) continue;
      if (label.size() == m.size() || label[m.size()] == '(' || label[m.size()] == '+') best = m;
    }
    return best;
  }
  // Mean nanoseconds per `auto` decision over requests of these sizes at these offsets, made as
  // requests make them (page-cache probe included where the profile needs one).
  double decision_ns(const std::vector<std::pair<size_t, int64_t>>& reqs, bool write, size_t rounds) {
    Use use(*this, "explain");
    nb::gil_scoped_release nogil;
    const int op = write ? ACCIO_OP_WRITE : ACCIO_OP_READ;
    const int64_t t0 = accio_bench::now_ns();
    for (size_t r = 0; r < rounds; ++r)
      for (auto& [n, off] : reqs)
        if (!accio_mechanism_for_at(f_.handle(), nullptr, n, off, op)) throw accio::Error::last();
    return double(accio_bench::now_ns() - t0) / double(std::max<size_t>(1, rounds * reqs.size()));
  }
  accio_file* handle() const { return f_.handle(); }  // only inside a Use (close() frees it)
  std::string setting(const std::string& name) {
    Use use(*this, "setting");
    return accio::detail::read_string(  // a long profile path is not cut
        [&](char* out, size_t len) { return accio_file_setting(f_.handle(), name.c_str(), out, len); });
  }
  nb::dict residency(int64_t off, int64_t len) {
    Use use(*this, "residency");
    int64_t cached, dirty, total;
    accio::detail::check(accio_residency(f_.handle(), off, len, &cached, &dirty, &total));
    nb::dict d;
    d["cached"] = cached;
    d["dirty"] = dirty;
    d["total"] = total;
    return d;
  }

  // One call of a Python thread on the file, from its start to its end (I/O included): close()
  // waits for none to be left. Refused once close() began. Every use of handle() is inside one
  // (the methods here, gds_mode and the bench helpers).
  class Use {
   public:
    Use(PyFile& f, const char* op) : f_(f), u_(f.users()) {
      u_.n.fetch_add(1);
      if (f_.closed_.load()) {  // seq_cst both sides: either we see closed_, or close() sees us
        leave();
        throw accio::Error(EBADF, op, f_.path_, -1, std::string(op) + " '" + f_.path_ + "': file is closed (errno 9)");
      }
      for (int i = 0; i < kSlots; ++i)
        if (!t_files_[i]) {
          t_files_[i] = &f_;
          slot_ = i;
          break;
        }
    }
    ~Use() {
      if (slot_ >= 0) t_files_[slot_] = nullptr;
      leave();
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    // Whether the calling thread is inside a call on f (a Use of it not yet ended).
    static bool inside(const PyFile* f) {
      for (const PyFile* x : t_files_)
        if (x == f) return true;
      return false;
    }

   private:
    void leave() {
      if (u_.n.fetch_sub(1) == 1 && f_.closed_.load()) {
        std::lock_guard<std::mutex> g(u_.mu);
        u_.cv.notify_all();
      }
    }
    PyFile& f_;
    Users& u_;  // the count this call is in (a call that spans a fork ends in the parent's)
    int slot_ = -1;
    // The files of the calling thread's calls in progress (nested: a property that reads another
    // file; a bench phase holds one per file); past kSlots at once, the rest are not kept.
    static constexpr int kSlots = 16;
    static inline thread_local const PyFile* t_files_[kSlots];
  };

 private:
  std::string path_;  // before f_: its open takes it
  accio::File f_;
  std::atomic<bool> closed_{false};
  std::atomic<Users*> users_{new Users(g_forks.load())};
  Users& users() {
    Users* u = users_.load();
    while (u->forks != g_forks.load()) {
      Users* mine = new Users(g_forks.load());
      if (users_.compare_exchange_strong(u, mine)) return *mine;
      delete mine;  // another thread of the child made one first: u is now that one
    }
    return *u;
  }
  std::mutex close_mu_;
};

}  // namespace

NB_MODULE(_ext, m) {
  m.doc() = "accio native extension; use the accio package instead";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const accio::Error& e) {
      try {
        nb::object exc = python_error(e);
        PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
      } catch (nb::python_error& raised) {
        // Making the exception ran Python code, where a pending signal raised (Ctrl-C): that
        // exception, as itself (it became a RuntimeError holding its traceback's text).
        raised.restore();
      }
    }
  });

  nb::class_<PyFuture>(m, "Future")
      .def("result", &PyFuture::result, "timeout"_a = nb::none())
      .def("done", &PyFuture::done)
      .def("notify", &PyFuture::notify, "owner"_a, "Register the completion callback for owner, an accio.Future.")
      .def("observe", &PyFuture::observe, "From now on the callback settles owner (settled now if done).")
      .def("wait", &PyFuture::wait, "timeout"_a = nb::none(),
           "Wait for the request (None: as long as it takes) and settle owner; False on timeout.")
      .def("poll", &PyFuture::poll, "Settle owner if the request has completed; whether it has.");
  m.def("futures_drain", &futures_drain, "At exit: take no more completion callbacks; wait for those in flight.");
  // A forked child has none of the parent's requests, and perhaps a lock its workers held.
  pthread_atfork(nullptr, nullptr, [] {
    g_pending = new Pending;
    g_forks.fetch_add(1, std::memory_order_relaxed);
  });

  nb::class_<PyFile>(m, "File")
      .def(nb::init<nb::handle, const std::string&, const std::vector<std::pair<std::string, std::string>>&>(), "path"_a,
           "mode"_a, "settings"_a)
      .def("read_into", &PyFile::read_into, "buf"_a, "offset"_a, "expect"_a = nb::none())
      .def("write_from", &PyFile::write_from)
      .def("append", &PyFile::append)
      .def("start", &PyFile::async, "buf"_a, "offset"_a, "write"_a, nb::rv_policy::take_ownership)
      .def("submit", &PyFile::submit, nb::rv_policy::take_ownership)
      .def("fsync", &PyFile::fsync)
      .def("size", &PyFile::size)
      .def("fileno", &PyFile::fileno)
      .def("close", &PyFile::close)
      .def("closed", &PyFile::closed)
      .def("plan", &PyFile::plan)
      .def("stats", &PyFile::stats)
      .def("explain", &PyFile::explain, "nbytes"_a, "offset"_a, "write"_a, "aligned"_a)
      .def("decision_ns", &PyFile::decision_ns, "requests"_a, "write"_a, "rounds"_a)
      .def("setting", &PyFile::setting)
      .def("residency", &PyFile::residency);

  auto run_bench = [](const std::vector<PyFile*>& files, const std::vector<int64_t>& offsets,
                      const std::vector<int64_t>& lengths, const accio_bench::Phase& ph) {
    if (files.size() != offsets.size() || files.size() != lengths.size())
      throw nb::value_error("files, offsets and lengths must have the same length");
    std::vector<accio_bench::Job> jobs;
    std::vector<std::unique_ptr<PyFile::Use>> uses;  // close() waits for the phase
    for (size_t i = 0; i < files.size(); ++i) {
      uses.push_back(std::make_unique<PyFile::Use>(*files[i], "bench"));
      jobs.push_back({files[i]->handle(), offsets[i], lengths[i]});
    }
    // Ctrl-C (or SIGTERM, which accio bench makes one) ends the phase after the requests in flight:
    // the caller's thread takes Python's pending signals every 20 ms, and a handler that raised stops
    // the jobs; its exception is raised once they have ended.
    std::atomic<bool> stop{false};
    PyObject *type = nullptr, *value = nullptr, *trace = nullptr;
    accio_bench::Phase p = ph;
    p.stop = &stop;
    std::vector<accio_bench::Interval> out;
    try {
      nb::gil_scoped_release nogil;
      out = accio_bench::run_phase(jobs, p, [&] {
        if (stop.load()) return;
        nb::gil_scoped_acquire gil;
        if (PyErr_CheckSignals() != 0) {
          PyErr_Fetch(&type, &value, &trace);
          stop = true;
        }
      });
    } catch (...) {  // a job's error: the interruption, if there was one, is what the user is told
      if (!stop) throw;
    }
    if (stop) {
      PyErr_Restore(type, value, trace);
      throw nb::python_error();
    }
    return out;
  };
  m.def("bench_phase", [run_bench](const std::vector<PyFile*>& files, const std::vector<int64_t>& offsets,
                                   const std::vector<int64_t>& lengths, size_t record, bool write, bool random,
                                   bool fsync, bool verify, uint64_t seed, int device) {
    std::vector<std::tuple<int64_t, int64_t, int64_t>> out;
    // No latencies asked for: no clock read per request (tune and the scripts time the phase only).
    for (auto& iv : run_bench(files, offsets, lengths, {record, write, random, fsync, verify, seed, device, 0, 1, false}))
      out.emplace_back(iv.start_ns, iv.end_ns, iv.bytes);
    return out;
  }, "files"_a, "offsets"_a, "lengths"_a, "record"_a, "write"_a, "random"_a = false, "fsync"_a = false,
     "verify"_a = false, "seed"_a = 1, "device"_a = -1, "Run one timed bench phase (see bench_phase.hpp); (start_ns, end_ns, bytes) per job.");
  m.def("bench_run", [run_bench](const std::vector<PyFile*>& files, const std::vector<int64_t>& offsets,
                                 const std::vector<int64_t>& lengths, size_t record, bool write, bool random,
                                 bool fsync, bool verify, uint64_t seed, int device, int64_t runtime_ns, int iodepth,
                                 bool time_requests) {
    auto r = run_bench(files, offsets, lengths,
                       {record, write, random, fsync, verify, seed, device, runtime_ns, iodepth, time_requests});
    nb::list intervals;
    accio_bench::Histogram all;
    for (auto& iv : r) {
      intervals.append(nb::make_tuple(iv.start_ns, iv.end_ns, iv.bytes, iv.ops));
      all.merge(iv.latency);
    }
    nb::list latency;  // (lowest ns, one past the highest ns, count) of every bucket that holds requests
    for (size_t b = 0; b < all.counts.size(); ++b)
      if (all.counts[b]) latency.append(nb::make_tuple(accio_bench::Histogram::lower(b), accio_bench::Histogram::upper(b), all.counts[b]));
    nb::dict out;
    out["intervals"] = intervals;
    out["latency_ns"] = latency;
    return out;
  }, "files"_a, "offsets"_a, "lengths"_a, "record"_a, "write"_a, "random"_a = false, "fsync"_a = false,
     "verify"_a = false, "seed"_a = 1, "device"_a = -1, "runtime_ns"_a = 0, "iodepth"_a = 1,
     "time_requests"_a = true,
     "Run one timed bench phase (see bench_phase.hpp): {'intervals': [(start_ns, end_ns, bytes, requests)] per "
     "job, 'latency_ns': [(low, high, count)] the buckets of every request's latency, all jobs merged}.");

  nb::class_<DeviceArray>(m, "DeviceArray")
      .def(nb::init<size_t, int, bool>(), "nbytes"_a, "device"_a = 0, "managed"_a = false)
      .def_prop_ro("ptr", &DeviceArray::ptr)
      .def_prop_ro("nbytes", &DeviceArray::nbytes)
      .def_prop_ro("device", &DeviceArray::device)
      .def_prop_ro("managed", &DeviceArray::managed)
      .def_prop_ro("__cuda_array_interface__", &DeviceArray::cai)
      .def("__len__", &DeviceArray::nbytes)
      .def("to_bytes", &DeviceArray::to_bytes, "A host copy of the contents.")
      .def("copy_from", &DeviceArray::copy_from, "src"_a, "Copies a host or device buffer of the same size in.")
      .def("__dlpack_device__", [](const DeviceArray& a) {
        return nb::make_tuple(a.managed() ? nb::device::cuda_managed::value : nb::device::cuda::value, a.device());
      })
      .def("__dlpack__", [](nb::handle self, nb::kwargs kw) {
        DeviceArray& a = nb::cast<DeviceArray&>(self);
        size_t shape[1] = {a.nbytes()};
        nb::ndarray<nb::array_api, uint8_t, nb::ndim<1>> view(a.raw(), 1, shape, self, nullptr, nb::dtype<uint8_t>(),
                                                a.managed() ? nb::device::cuda_managed::value : nb::device::cuda::value,
                                                a.device());
        // nanobind's exporter makes the capsule (versioned when max_version asks for it) and checks the
        // keywords; stream needs nothing: accio's copies into a DeviceArray are synchronous.
        nb::object exporter = nb::cast(view).attr("__dlpack__");
        PyObject* cap = PyObject_Call(exporter.ptr(), nb::tuple().ptr(), kw.ptr());
        if (!cap) throw nb::python_error();
        return nb::steal(cap);  // a DLPack capsule that keeps self alive
      }, "Exports the memory as a DLPack capsule (stream, max_version, dl_device, copy as the array API says).");

  nb::class_<PinnedBuffer>(m, "PinnedBuffer", nb::type_slots(kPinnedSlots),
                           "Pinned host memory with the buffer protocol (see accio.pinned_empty).")
      .def(nb::init<size_t>(), "nbytes"_a)
      .def_prop_ro("nbytes", &PinnedBuffer::nbytes)
      .def_prop_ro("address", &PinnedBuffer::address)
      .def_prop_ro("pinned", &PinnedBuffer::pinned,
                   "How the pages are held: 'cuda' (registered with the CUDA driver), 'mlock', or 'pageable'.")
      .def("__len__", &PinnedBuffer::nbytes)
      .def("__repr__", [](const PinnedBuffer& b) {
        return "<accio.PinnedBuffer " + std::to_string(b.nbytes()) + " bytes, pinned=" + b.pinned() + ">";
      });

  m.def("cuda_available", [] {
    char why[512];
    const bool ok = accio_cuda_available(why, sizeof why);
    return std::make_pair(ok, std::string(why));
  });
  m.def("cuda_current_device", [] { return accio_cuda_current_device(); },
        "The GPU of the calling thread's current CUDA context, -1 without one (or without a driver).");
  m.def("gpus", [] {
    nb::list out;
    for (int i = 0, n = accio_gpu_count(); i < n; ++i) {
      accio_gpu_info g;
      if (accio_gpu_info_get(i, &g) != 0) continue;
      nb::dict d;
      d["ordinal"] = g.ordinal;
      d["name"] = std::string(g.name);
      d["pci_bus_id"] = std::string(g.pci_bus_id);
      d["memory"] = g.memory;
      d["compute_capability"] = std::to_string(g.cc_major) + "." + std::to_string(g.cc_minor);
      d["multiprocessors"] = g.multiprocessors;
      d["copy_engines"] = g.copy_engines;
      d["numa_node"] = g.numa_node;
      d["link"] = std::string(g.link);
      d["cpus"] = std::string(g.cpus);
      out.append(d);
    }
    return out;
  });
  nb::class_<HeldView>(m, "HeldView", "A buffer held (export and all) while this object lives.")
      .def(nb::init<nb::handle, bool>(), "obj"_a, "writable"_a = false)
      .def_prop_ro("address", &HeldView::address)
      .def_prop_ro("nbytes", &HeldView::nbytes)
      .def_prop_ro("where", &HeldView::where)
      .def_prop_ro("device", &HeldView::device);
  m.def("copy", [](nb::handle dst, nb::handle src, std::optional<size_t> nbytes) {
    View d(dst, true), s(src, false);
    const size_t n = nbytes.value_or(d.size());
    if (!nbytes && d.size() != s.size())
      throw nb::value_error(("copy: destination holds " + std::to_string(d.size()) + " bytes, source " +
                             std::to_string(s.size()) + "; pass nbytes to copy a prefix").c_str());
    if (n > d.size() || n > s.size())
      throw nb::value_error(("copy: " + std::to_string(n) + " bytes do not fit (destination " +
                             std::to_string(d.size()) + ", source " + std::to_string(s.size()) + " bytes)").c_str());
    nb::gil_scoped_release nogil;
    accio::detail::check(accio_device_copy(d.ptr(), s.ptr(), n));
  }, "dst"_a, "src"_a, "nbytes"_a = nb::none(),
     "Copies nbytes (default: all; then the sizes must match) between any two buffers, host or device.");
  m.def("mem_kind", [](nb::handle obj) {
    View v(obj, false);
    int dev = -1;
    return std::make_pair(std::string(kMemKindNames[accio_mem_kind(v.ptr(), &dev)]), dev);
  });
  m.def("gds_info", [] {
    char d[1024];
    const bool ok = accio_gds_info(d, sizeof d);
    return std::make_pair(ok, std::string(d));
  });
  m.def("gds_mode", [](PyFile& f) {
    char d[1024];
    static const char* paths[] = {"compat", "direct", "staged"};  // accio_gds_mode's 0, 1, 2
    PyFile::Use use(f, "gds_mode");
    const int path = accio::detail::check(accio_gds_mode(f.handle(), d, sizeof d));
    return std::make_pair(std::string(paths[path]), std::string(d));
  });
  m.def("cuda_copy_seconds", [](int device, bool to_device, size_t nbytes, size_t chunk, int threads) {
    double sec = 0;
    {
      nb::gil_scoped_release nogil;
      accio::detail::check(accio_cuda_copy_seconds(device, to_device, nbytes, chunk, threads, &sec));
    }
    return sec;
  }, "device"_a, "to_device"_a, "nbytes"_a, "chunk"_a, "threads"_a);
  m.def("mechanism_is_device", [](const std::string& name) {
    for (int i = 0; i < accio_mechanism_count(); ++i)
      if (name == accio_mechanism_name(i)) return accio_mechanism_device(i) == 1;
    throw nb::value_error(("unknown mechanism " + name).c_str());
  });

  m.def("version", [] { return std::string(accio_version()); });
  m.def("profile_key", [](const std::string& path) {
    accio_profile_key k;
    accio::detail::check(accio_profile_key_of(path.c_str(), &k));
    nb::dict d;
    d["filesystem"] = std::string(k.filesystem);
    d["device"] = std::string(k.device);
    d["kernel"] = std::string(k.kernel);
    d["accio"] = std::string(k.version);
    d["file"] = std::string(k.file);
    return d;
  }, "path"_a, "The tuning profile key of the filesystem holding path, and the profile's file.");
  m.def("parse_size", [](const std::string& text) { return accio::detail::check(accio_parse_size(text.c_str())); },
        "Bytes in a size such as 4096, 4k, 16MiB or 1g (binary units).");
  m.def("git_commit", [] { return std::string(ACCIO_GIT_COMMIT); });
  m.def("settings", [](const std::vector<std::pair<std::string, std::string>>& kv) {
    accio::Settings s = to_settings(kv);
    std::vector<std::tuple<std::string, std::string, std::string, std::string>> out;
    for (int i = 0; i < accio_setting_count(); ++i) {
      std::string value;
      try {
        value = s.get(accio_setting_name(i));
      } catch (const accio::Error& e) {  // another library's row with a bad ACCIO_* value: its error
        value = std::string("(") + e.what() + ")";
      }
      out.emplace_back(accio_setting_name(i), accio_setting_env(i), accio_setting_doc(i), std::move(value));
    }
    return out;
  });
  m.def("other_variables", [] {  // the ACCIO_* variables read that are not settings rows (base/variables.h)
    return std::vector<std::string>(accio_other_variables, accio_other_variables + ACCIO_OTHER_VARIABLES);
  });
  m.def("env_settings", [] {
    // Each row as a handle opened now would start with it (defaults + ACCIO_*), or that row's own
    // error where its variable's value is bad, whatever the others hold: what `accio info` shows.
    std::vector<std::tuple<std::string, std::optional<std::string>, std::optional<std::string>>> out;
    for (int i = 0; i < accio_setting_count(); ++i) {
      const char* name = accio_setting_name(i);
      try {
        out.emplace_back(name, accio::detail::read_string([&](char* o, size_t len) {
                           return accio_settings_get(nullptr, name, o, len);
                         }), std::nullopt);
      } catch (const accio::Error& e) {
        out.emplace_back(name, std::nullopt, std::string(e.what()));
      }
    }
    return out;
  }, "[(name, value, error)]: each setting from the defaults and the ACCIO_* environment, value None and "
     "error the reason where that row's variable is bad.");
  m.def("setting_specs", [] {
    nb::list out;
    for (int i = 0; i < accio_setting_count(); ++i) {
      accio_setting_spec s;
      accio::detail::check(accio_setting_spec_of(i, &s));
      nb::dict d;
      d["name"] = s.name, d["env"] = s.env, d["doc"] = s.doc, d["kind"] = s.kind, d["default"] = s.default_value;
      d["min"] = s.min, d["max"] = s.max, d["choices"] = s.choices;
      out.append(d);
    }
    return out;
  }, "The settings table: every row's name, env, doc, kind, default, min, max (count, size) and choices.");
  m.def("mechanisms", [] {
    nb::list out;
    for (int i = 0; i < accio_mechanism_count(); ++i) {
      char why[512];
      nb::dict d;
      d["name"] = accio_mechanism_name(i);
      d["available"] = accio_mechanism_available(i, why, sizeof why) == 1;
      d["detail"] = std::string(why);
      d["device"] = accio_mechanism_device(i) == 1;
      nb::list knobs;
      for (int k = 0; accio_mechanism_knob(i, k); ++k) knobs.append(accio_mechanism_knob(i, k));
      d["knobs"] = knobs;
      out.append(d);
    }
    return out;
  }, "Every mechanism in display order: name, available and detail (why not), device (serves GPU memory), "
     "knobs (the settings it reads).");
  m.def("plan_describe", [](const std::string& plan_json) {
    int aligned = 0;
    std::string label = accio::detail::read_string(
        [&](char* out, size_t len) { return accio_plan_describe(plan_json.c_str(), out, len, &aligned); }, 64);
    return std::make_pair(label, aligned == 1);
  }, "plan_json"_a, "A profile's plan object (JSON) as the planner shows it: (label, needs_alignment).");
  m.def("profile_describe", [](std::optional<std::string> text, std::optional<std::string> source) {
    const char* t = text ? text->c_str() : nullptr;
    const char* src = source ? source->c_str() : text ? "profile" : nullptr;
    return accio::detail::read_string(
        [&](char* out, size_t len) { return accio_profile_describe(t, src, out, len); }, 4096);
  }, "text"_a.none(), "source"_a.none() = nb::none(),
     "A profile document (None: the built-in model, of the device under `source` when it names a file "
     "or directory) as the planner reads it, as a profile document (JSON) with every plan's label and "
     "needs_alignment.");
  m.attr("MIN_EVEN_TASK") = ACCIO_MIN_EVEN_TASK;
  m.attr("PRELOAD_THRESHOLD_DEFAULT") = ACCIO_PRELOAD_THRESHOLD_DEFAULT;
  // `accio run`: its options and exit statuses, one definition with the native launcher (run_cli.h)
  m.attr("RUN_OWN_ERROR") = ACCIO_RUN_OWN_ERROR;
  m.attr("RUN_CANNOT_EXECUTE") = ACCIO_RUN_CANNOT_EXECUTE;
  m.attr("RUN_NOT_FOUND") = ACCIO_RUN_NOT_FOUND;
  {
    nb::list opts;
    auto str_or_none = [](const char* s) { return s ? nb::object(nb::str(s)) : nb::none(); };
#define ACCIO_RUN_OPTION_ROW(id, name, letter, metavar, help) \
  opts.append(nb::make_tuple(name, str_or_none(letter), str_or_none(metavar), help));
    ACCIO_RUN_OPTIONS(ACCIO_RUN_OPTION_ROW)
#undef ACCIO_RUN_OPTION_ROW
    m.attr("RUN_OPTIONS") = nb::tuple(opts);
  }
  m.def("probe", [](const std::string& feature, std::optional<std::string> path) {
    char detail[512] = "";
    int rc = accio_probe(feature.c_str(), path ? path->c_str() : nullptr, detail, sizeof detail);
    accio::detail::check(rc);
    return std::make_pair(rc == 1, std::string(detail));
  }, "feature"_a, "path"_a = nb::none());
  m.def("global_stats", [] {
    accio_stats s;
    accio_global_stats(&s);
    return stats_dict(s, accio_global_mechanism_stats);
  });
  m.def("reset_global_stats", [] { accio_global_stats_reset(); });
  m.def("set_log_sink", [](nb::object fn) {
    if (fn.is_none()) {
      accio_set_log_callback(nullptr, nullptr);
      drain_log(nullptr);  // what workers queued before still goes to the old sink
      return;
    }
    if (!g_log_sink) g_log_sink = new nb::object();
    *g_log_sink = fn;
    accio_set_log_callback(log_to_python, nullptr);
  }, "fn"_a.none(), "Route the engine's messages to fn(level, key, message), or back to stderr (None).");
  m.def("drain_log", [] { drain_log(nullptr); }, "Deliver the messages other threads queued now.");
  m.def("warnings", [] {
    std::string buf(accio_warnings(nullptr, 0) + 1, '\0');
    accio_warnings(buf.data(), buf.size());
    buf.resize(buf.size() - 1);
    return buf;
  });
}
