! accio for Fortran: module accio, the C API (accio.h) through iso_c_binding, with Fortran strings
! where C takes NUL-terminated ones. A module source, not a compiled .mod (a .mod file belongs to one
! compiler and its version): compile it once with your program, before the files that `use accio`:
!
!   gfortran -c $(accio config --fortran)          # accio.mod and accio.o, once
!   gfortran app.f90 accio.o $(accio config --libs)
!
! or in CMake, after project(app Fortran): find_package(accio) and link accio::fortran.
! Tested with gfortran 12 (-std=f2018). It needs Fortran 2018's assumed-type, assumed-rank dummies
! (type(*), dimension(..)), which ifx, nvfortran and flang also have, untested here.
!
! A buffer is any contiguous variable: an array of any type, kind and rank, a contiguous section, a
! scalar, a character string. A strided section (a(2,:)) is refused with -EINVAL and a message:
! copy it to a contiguous array first. Sizes and offsets count bytes (integer(c_size_t),
! integer(c_int64_t)); results are as in C: bytes moved, or a negative errno, with
! accio_last_error() saying which operation, path, offset and why.
!
!   use accio
!   implicit none
!   type(c_ptr) :: f
!   real(8), allocatable :: field(:,:)
!   integer(c_int64_t) :: n
!   allocate (field(4096, 4096))
!   if (accio_open(f, "checkpoint.bin", "w") /= 0) error stop accio_last_error()
!   n = accio_pwrite(f, field, accio_bytes(field), 0_c_int64_t)
!   if (n /= accio_bytes(field)) error stop accio_last_error()
!   if (accio_close(f) /= 0) error stop accio_last_error()
!
! An asynchronous request keeps using its buffer until accio_future_wait returns: the buffer must
! outlive the call (no expression, no temporary) and should have the ASYNCHRONOUS attribute.
! Memory that Fortran does not see as a variable (accio_host_alloc's, GPU memory from
! accio_device_alloc or a CUDA/OpenACC runtime) goes through accio_pread_ptr and accio_pwrite_ptr.
!
! GPUs (accio loads the CUDA driver at run time; the same program runs without one):
!
!   type(c_ptr) :: dev
!   if (accio_device_alloc(0, accio_bytes(field), .false., dev) /= 0) error stop accio_last_error()
!   n = accio_pread_ptr(f, dev, accio_bytes(field), 0_c_int64_t)     ! file -> GPU memory
!   if (accio_device_free(dev) /= 0) error stop accio_last_error()
module accio
  use, intrinsic :: iso_c_binding, only: c_ptr, c_null_ptr, c_char, c_null_char, c_int, c_int8_t, c_int16_t, &
                                         c_int32_t, c_int64_t, c_size_t, c_intptr_t, c_float, c_double, &
                                         c_float_complex, c_double_complex, c_bool, c_associated, c_f_pointer, c_loc, &
                                         c_funptr, c_null_funptr, c_funloc
  implicit none
  private

  public :: c_ptr, c_null_ptr, c_int, c_int64_t, c_size_t, c_intptr_t, c_double, c_associated, c_f_pointer, c_loc
  public :: ACCIO_OP_READ, ACCIO_OP_WRITE, ACCIO_OP_FRESH_CACHE, ACCIO_HOST_PAGEABLE, ACCIO_HOST_MLOCK, ACCIO_HOST_CUDA
  public :: ACCIO_LOG_INFO, ACCIO_LOG_WARNING, ACCIO_LOG_ERROR
  public :: ACCIO_MEM_HOST, ACCIO_MEM_PINNED, ACCIO_MEM_DEVICE, ACCIO_MEM_MANAGED, ACCIO_STREAM_LEGACY, &
            ACCIO_STREAM_PER_THREAD
  public :: accio_request, accio_stats, accio_gpu_info, accio_plan_stat, accio_profile_key, accio_setting_spec
  public :: accio_future_callback, accio_log_callback, accio_device_callback
  public :: accio_version, accio_last_error, accio_last_errno, accio_last_error_op, accio_last_error_path, &
            accio_last_error_offset, accio_set_last_error
  public :: accio_settings_new, accio_settings_set, accio_settings_get, accio_settings_free
  public :: accio_setting_count, accio_setting_name, accio_setting_env, accio_setting_doc, accio_setting_spec_of, &
            accio_setting_register
  public :: accio_open, accio_open_fd, accio_close, accio_file_fd, accio_pread, accio_pwrite, accio_append, &
            accio_fsync, accio_size, accio_bytes
  public :: accio_pread_ptr, accio_pwrite_ptr
  public :: accio_mechanism_for, accio_mechanism_for_at, accio_min_accelerated, accio_explain, accio_file_plans, &
            accio_file_stats, accio_file_mechanism_stats, accio_file_setting
  public :: accio_profile_key_of, accio_prefetch_window, accio_plan_describe, accio_profile_describe, accio_probe
  public :: accio_pread_async, accio_pwrite_async, accio_submit, accio_future_wait, accio_future_ready, &
            accio_future_free, accio_future_on_complete
  public :: accio_global_mechanism_stats, accio_mechanism_count, accio_mechanism_available, accio_mechanism_knob
  public :: accio_set_log_callback, accio_log, accio_cuda_copy_seconds, accio_cuda_with_device
  public :: accio_host_alloc, accio_host_free
  public :: accio_settings_copy, accio_parse_size, accio_global_stats, accio_global_stats_reset, accio_residency, &
            accio_warnings, accio_string, accio_mechanism_name, accio_mechanism_device
  public :: accio_cuda_available, accio_gpu_count, accio_gpu_info_get, accio_mem_kind, accio_device_alloc, &
            accio_device_free, accio_device_copy, accio_cuda_stream_sync, accio_gds_info, accio_gds_mode, &
            accio_cuda_current_device

  integer(c_int), parameter :: ACCIO_OP_READ = 0, ACCIO_OP_WRITE = 1
  ! or'ed into op of accio_mechanism_for_at: probe this request's page-cache residency afresh
  integer(c_int), parameter :: ACCIO_OP_FRESH_CACHE = 256
  integer(c_int), parameter :: ACCIO_LOG_INFO = 20, ACCIO_LOG_WARNING = 30, ACCIO_LOG_ERROR = 40
  integer(c_int), parameter :: ACCIO_HOST_PAGEABLE = 0, ACCIO_HOST_MLOCK = 1, ACCIO_HOST_CUDA = 2
  integer(c_int), parameter :: ACCIO_MEM_HOST = 0, ACCIO_MEM_PINNED = 1, ACCIO_MEM_DEVICE = 2, ACCIO_MEM_MANAGED = 3
  ! accio_cuda_stream_sync's streams: CUDA's legacy default stream and the thread's per-thread one
  ! (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD); any other non-zero value is a CUstream handle
  integer(c_intptr_t), parameter :: ACCIO_STREAM_LEGACY = 1, ACCIO_STREAM_PER_THREAD = 2
  integer(c_int), parameter :: EINVAL = 22

  ! accio_string(chars): the characters of a C string held in a character array (an accio_gpu_info
  ! field), up to its NUL; accio_string(p): a C string given by its address (a log callback's key
  ! and message, an accio_setting_spec field), copied ("" for c_null_ptr).
  interface accio_string
    module procedure from_buffer, f_string
  end interface

  interface accio_bytes
    module procedure bytes_i1, bytes_i2, bytes_i4, bytes_i8, bytes_r4, bytes_r8, bytes_c4, bytes_c8, bytes_l, &
                     bytes_lc, bytes_ch
  end interface

  ! One request of accio_submit: buf = c_loc(a contiguous variable), size and offset in bytes.
  type, bind(C) :: accio_request
    type(c_ptr) :: buf = c_null_ptr
    integer(c_size_t) :: size = 0
    integer(c_int64_t) :: offset = 0
  end type

  ! A handle's counters (accio_file_stats); C's uint64_t are integer(c_int64_t) here.
  type, bind(C) :: accio_stats
    integer(c_int64_t) :: reads, writes, fsyncs, errors
    integer(c_int64_t) :: bytes_read, bytes_written
    integer(c_int64_t) :: read_ns, write_ns, fsync_ns
    integer(c_int64_t) :: mechanism_calls(16), mechanism_bytes(16)  ! deprecated in C; kept for the layout
    integer(c_int32_t) :: last_mechanism
  end type

  ! One GPU (accio_gpu_info_get). The text fields are C strings: accio_string(info%name) gives the
  ! Fortran string.
  type, bind(C) :: accio_gpu_info
    integer(c_int) :: ordinal
    character(kind=c_char) :: name(256), pci_bus_id(32)  ! "0000:17:00.0"
    integer(c_int64_t) :: memory                          ! bytes
    integer(c_int) :: cc_major, cc_minor, multiprocessors, copy_engines
    integer(c_int) :: numa_node                           ! -1 unknown
    character(kind=c_char) :: link(64)                    ! "32.0 GT/s PCIe x16", or ""
    character(kind=c_char) :: cpus(256)                   ! the CPUs local to the GPU, "0-15,32-47", or ""
  end type

  ! One plan that served a handle's requests (accio_file_plans): accio_string(p%plan) "parallel(even)",
  ! accio_string(p%why) the decision's reason, and its calls and bytes.
  type, bind(C) :: accio_plan_stat
    character(kind=c_char) :: plan(128), why(384)
    integer(c_int64_t) :: calls, bytes
  end type

  ! The tuning profile `auto` uses for a filesystem (accio_profile_key_of): accio_string of a field.
  type, bind(C) :: accio_profile_key
    character(kind=c_char) :: filesystem(64)  ! "ext4"
    character(kind=c_char) :: device(256)     ! the mount source, "/dev/nvme0n1p2"
    character(kind=c_char) :: kernel(128)     ! uname -r
    character(kind=c_char) :: version(32)     ! accio's version
    character(kind=c_char) :: file(1024)      ! where the profile is, or would be
  end type

  ! A row of the settings table as accio_setting_spec_of gives it: accio_string(spec%name) and so on
  ! (the strings live for the process). To add a row from Fortran, accio_setting_register takes
  ! Fortran strings.
  type, bind(C) :: accio_setting_spec
    type(c_ptr) :: name = c_null_ptr, env = c_null_ptr, doc = c_null_ptr, kind = c_null_ptr, &
                   default_value = c_null_ptr
    integer(c_int64_t) :: min = 0, max = huge(0_c_int64_t)  ! as in C++: unbounded above
    type(c_ptr) :: choices = c_null_ptr
  end type

  abstract interface
    ! accio_future_on_complete's callback: the request's result (bytes, or -errno) and the arg given.
    ! It runs on the worker that completed the request (or at once in the caller when it is done
    ! already): it must return promptly and be safe to run on another thread. Give a module (or
    ! external) procedure: an internal one compiles, but gfortran passes it as a trampoline on its
    ! host's stack, which needs an executable stack and is gone once the host returns.
    subroutine accio_future_callback(fut, result, arg) bind(C)
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: fut
      integer(c_int64_t), value :: result
      type(c_ptr), value :: arg
    end subroutine
    ! accio_set_log_callback's: level ACCIO_LOG_*, the key and the message as C strings
    ! (accio_string(key)), valid until it returns. It may run on any of accio's threads, holding an
    ! internal lock: it must return promptly and not call accio.
    subroutine accio_log_callback(level, key, message, user) bind(C)
      import :: c_int, c_ptr
      integer(c_int), value :: level
      type(c_ptr), value :: key, message, user
    end subroutine
    ! accio_cuda_with_device's: runs in the calling thread with the GPU current
    subroutine accio_device_callback(arg) bind(C)
      import :: c_ptr
      type(c_ptr), value :: arg
    end subroutine
  end interface

  ! The C functions that take neither a string nor a buffer, as they are.
  interface
    ! defaults + environment; c_null_ptr on a bad ACCIO_* value
    function accio_settings_new() bind(C, name="accio_settings_new") result(s)
      import :: c_ptr
      type(c_ptr) :: s
    end function
    function accio_fsync(f) bind(C, name="accio_fsync") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: f
      integer(c_int) :: rc
    end function
    ! bytes, or -errno
    function accio_size(f) bind(C, name="accio_size") result(n)
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: f
      integer(c_int64_t) :: n
    end function
    ! bytes, or -errno; may be called again
    function accio_future_wait(fut) bind(C, name="accio_future_wait") result(n)
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: fut
      integer(c_int64_t) :: n
    end function
    ! 1 done, 0 not yet after timeout_ns nanoseconds
    function accio_future_ready(fut, timeout_ns) bind(C, name="accio_future_ready") result(done)
      import :: c_ptr, c_int64_t, c_int
      type(c_ptr), value :: fut
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: done
    end function
    function accio_file_stats(f, stats) bind(C, name="accio_file_stats") result(rc)
      import :: c_ptr, c_int, accio_stats
      type(c_ptr), value :: f
      type(accio_stats), intent(out) :: stats
      integer(c_int) :: rc
    end function
    ! nbytes of page-locked host memory in p (how: ACCIO_HOST_*); 0 or -errno
    function accio_host_alloc(nbytes, p, how) bind(C, name="accio_host_alloc") result(rc)
      import :: c_ptr, c_size_t, c_int
      integer(c_size_t), value :: nbytes
      type(c_ptr), intent(out) :: p
      integer(c_int), intent(out) :: how
      integer(c_int) :: rc
    end function
    function accio_last_errno() bind(C, name="accio_last_errno") result(e)
      import :: c_int
      integer(c_int) :: e
    end function
    ! -1 when no offset applies
    function accio_last_error_offset() bind(C, name="accio_last_error_offset") result(o)
      import :: c_int64_t
      integer(c_int64_t) :: o
    end function
    ! bytes read (short only at end of file), or -errno: for memory given as an address
    function accio_pread_ptr(f, buf, nbytes, offset) bind(C, name="accio_pread") result(n)
      import :: c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: f, buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), value :: offset
      integer(c_int64_t) :: n
    end function
    ! nbytes, or -errno: for memory given as an address
    function accio_pwrite_ptr(f, buf, nbytes, offset) bind(C, name="accio_pwrite") result(n)
      import :: c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: f, buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), value :: offset
      integer(c_int64_t) :: n
    end function
    ! a copy of s (c_null_ptr when out of memory)
    function accio_settings_copy(s) bind(C, name="accio_settings_copy") result(copy)
      import :: c_ptr
      type(c_ptr), value :: s
      type(c_ptr) :: copy
    end function
    ! the process's counters over every handle (since accio_global_stats_reset); 0
    function accio_global_stats(stats) bind(C, name="accio_global_stats") result(rc)
      import :: c_int, accio_stats
      type(accio_stats), intent(out) :: stats
      integer(c_int) :: rc
    end function
    subroutine accio_global_stats_reset() bind(C, name="accio_global_stats_reset")
    end subroutine
    ! page-cache residency of [offset, offset+len) of f: bytes cached, dirty, and in the range
    ! (the file's end cuts it); 0 or -errno
    function accio_residency(f, offset, len, cached, dirty, total) bind(C, name="accio_residency") result(rc)
      import :: c_ptr, c_int64_t, c_int
      type(c_ptr), value :: f
      integer(c_int64_t), value :: offset, len
      integer(c_int64_t), intent(out) :: cached, dirty, total
      integer(c_int) :: rc
    end function
    ! 1 for a device mechanism (naive, staged, gds, pagecache: it serves GPU memory), 0 for a host
    ! one, -EINVAL for an unknown id (accio_stats's last_mechanism is an id)
    function accio_mechanism_device(id) bind(C, name="accio_mechanism_device") result(yes)
      import :: c_int
      integer(c_int), value :: id
      integer(c_int) :: yes
    end function
    ! the number of GPUs (0 without a driver or a GPU)
    function accio_gpu_count() bind(C, name="accio_gpu_count") result(n)
      import :: c_int
      integer(c_int) :: n
    end function
    ! the GPU of the calling thread's current CUDA context, -1 without one (or without a driver)
    function accio_cuda_current_device() bind(C, name="accio_cuda_current_device") result(n)
      import :: c_int
      integer(c_int) :: n
    end function
    ! 0, or -errno (-ENODEV: no such GPU)
    function accio_gpu_info_get(ordinal, info) bind(C, name="accio_gpu_info_get") result(rc)
      import :: c_int, accio_gpu_info
      integer(c_int), value :: ordinal
      type(accio_gpu_info), intent(out) :: info
      integer(c_int) :: rc
    end function
    ! where p lives: ACCIO_MEM_HOST, _PINNED, _DEVICE or _MANAGED; device gets the GPU or -1
    function accio_mem_kind(p, device) bind(C, name="accio_mem_kind") result(kind)
      import :: c_ptr, c_int
      type(c_ptr), value :: p
      integer(c_int), intent(out) :: device
      integer(c_int) :: kind
    end function
    ! copies nbytes between any two of host, pinned, device and managed memory; 0 or -errno
    function accio_device_copy(dst, src, nbytes) bind(C, name="accio_device_copy") result(rc)
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: dst, src
      integer(c_size_t), value :: nbytes
      integer(c_int) :: rc
    end function
    ! the buffered descriptor accio uses for f (owned by f: do not close it), or -EBADF
    function accio_file_fd(f) bind(C, name="accio_file_fd") result(fd)
      import :: c_ptr, c_int
      type(c_ptr), value :: f
      integer(c_int) :: fd
    end function
    ! the smallest request (one in flight) for which f runs a plan other than posix: under auto the
    ! profile's crossing point, 0 for a fixed mechanism, huge(0_c_int64_t) when posix serves every size
    function accio_min_accelerated(f, op) bind(C, name="accio_min_accelerated") result(n)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: f
      integer(c_int), value :: op
      integer(c_int64_t) :: n
    end function
    ! calls and bytes of mechanism id (0 <= id < accio_mechanism_count()) on f; 0 or -EINVAL
    function accio_file_mechanism_stats(f, id, calls, bytes) bind(C, name="accio_file_mechanism_stats") result(rc)
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: f
      integer(c_int), value :: id
      integer(c_int64_t), intent(out) :: calls, bytes
      integer(c_int) :: rc
    end function
    ! the same over the process (reset by accio_global_stats_reset)
    function accio_global_mechanism_stats(id, calls, bytes) bind(C, name="accio_global_mechanism_stats") result(rc)
      import :: c_int, c_int64_t
      integer(c_int), value :: id
      integer(c_int64_t), intent(out) :: calls, bytes
      integer(c_int) :: rc
    end function
    ! mechanism ids are 0 .. accio_mechanism_count() - 1
    function accio_mechanism_count() bind(C, name="accio_mechanism_count") result(n)
      import :: c_int
      integer(c_int) :: n
    end function
    ! settings rows are 0 .. accio_setting_count() - 1
    function accio_setting_count() bind(C, name="accio_setting_count") result(n)
      import :: c_int
      integer(c_int) :: n
    end function
    ! row i of the settings table; 0, or -EINVAL for no such row
    function accio_setting_spec_of(i, spec) bind(C, name="accio_setting_spec_of") result(rc)
      import :: c_int, accio_setting_spec
      integer(c_int), value :: i
      type(accio_setting_spec), intent(out) :: spec
      integer(c_int) :: rc
    end function
    ! waits for the work queued on a CUDA stream of GPU `device` (ACCIO_STREAM_LEGACY,
    ! ACCIO_STREAM_PER_THREAD or a CUstream handle; 0 is -EINVAL); 0 or -errno
    function accio_cuda_stream_sync(device, stream) bind(C, name="accio_cuda_stream_sync") result(rc)
      import :: c_int, c_intptr_t
      integer(c_int), value :: device
      integer(c_intptr_t), value :: stream
      integer(c_int) :: rc
    end function
  end interface

  ! The C functions behind the Fortran wrappers below.
  interface
    function c_open(out, path, mode, settings) bind(C, name="accio_open") result(rc)
      import :: c_ptr, c_char, c_int
      type(c_ptr), intent(out) :: out
      character(kind=c_char), dimension(*), intent(in) :: path, mode
      type(c_ptr), value :: settings
      integer(c_int) :: rc
    end function
    function c_close(f) bind(C, name="accio_close") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: f
      integer(c_int) :: rc
    end function
    function c_append(f, buf, nbytes) bind(C, name="accio_append") result(at)
      import :: c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: f, buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t) :: at
    end function
    function c_pread_async(f, buf, nbytes, offset, fut) bind(C, name="accio_pread_async") result(rc)
      import :: c_ptr, c_size_t, c_int64_t, c_int
      type(c_ptr), value :: f, buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), value :: offset
      type(c_ptr), intent(out) :: fut
      integer(c_int) :: rc
    end function
    function c_pwrite_async(f, buf, nbytes, offset, fut) bind(C, name="accio_pwrite_async") result(rc)
      import :: c_ptr, c_size_t, c_int64_t, c_int
      type(c_ptr), value :: f, buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), value :: offset
      type(c_ptr), intent(out) :: fut
      integer(c_int) :: rc
    end function
    function c_submit(f, op, reqs, n, futures) bind(C, name="accio_submit") result(rc)
      import :: c_ptr, c_int, c_size_t, accio_request
      type(c_ptr), value :: f
      integer(c_int), value :: op
      type(accio_request), dimension(*), intent(in) :: reqs
      integer(c_size_t), value :: n
      type(c_ptr), dimension(*), intent(out) :: futures
      integer(c_int) :: rc
    end function
    subroutine c_future_free(fut) bind(C, name="accio_future_free")
      import :: c_ptr
      type(c_ptr), value :: fut
    end subroutine
    subroutine c_settings_free(s) bind(C, name="accio_settings_free")
      import :: c_ptr
      type(c_ptr), value :: s
    end subroutine
    function c_host_free(p) bind(C, name="accio_host_free") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: p
      integer(c_int) :: rc
    end function
    function c_settings_set(s, name, value) bind(C, name="accio_settings_set") result(rc)
      import :: c_ptr, c_char, c_int
      type(c_ptr), value :: s
      character(kind=c_char), dimension(*), intent(in) :: name, value
      integer(c_int) :: rc
    end function
    function c_settings_get(s, name, out, len) bind(C, name="accio_settings_get") result(rc)
      import :: c_ptr, c_char, c_int, c_size_t
      type(c_ptr), value :: s
      character(kind=c_char), dimension(*), intent(in) :: name
      character(kind=c_char), dimension(*), intent(out) :: out
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function
    function c_explain(f, buf, nbytes, offset, op, plan, plan_len, why, why_len) bind(C, name="accio_explain") result(rc)
      import :: c_ptr, c_char, c_int, c_size_t, c_int64_t
      type(c_ptr), value :: f, buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), value :: offset
      integer(c_int), value :: op
      character(kind=c_char), dimension(*), intent(out) :: plan, why
      integer(c_size_t), value :: plan_len, why_len
      integer(c_int) :: rc
    end function
    function c_mechanism_for(f, nbytes, op) bind(C, name="accio_mechanism_for") result(p)
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: f
      integer(c_size_t), value :: nbytes
      integer(c_int), value :: op
      type(c_ptr) :: p
    end function
    function c_set_last_error(errnum, op, path, detail) bind(C, name="accio_set_last_error") result(rc)
      import :: c_ptr, c_char, c_int
      integer(c_int), value :: errnum
      character(kind=c_char), dimension(*), intent(in) :: op
      type(c_ptr), value :: path
      character(kind=c_char), dimension(*), intent(in) :: detail
      integer(c_int) :: rc
    end function
    function c_version() bind(C, name="accio_version") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_last_error() bind(C, name="accio_last_error") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_last_error_op() bind(C, name="accio_last_error_op") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_last_error_path() bind(C, name="accio_last_error_path") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_mechanism_name(id) bind(C, name="accio_mechanism_name") result(p)
      import :: c_ptr, c_int
      integer(c_int), value :: id
      type(c_ptr) :: p
    end function
    function c_parse_size(text) bind(C, name="accio_parse_size") result(n)
      import :: c_char, c_int64_t
      character(kind=c_char), dimension(*), intent(in) :: text
      integer(c_int64_t) :: n
    end function
    function c_warnings(out, len) bind(C, name="accio_warnings") result(n)
      import :: c_char, c_size_t
      character(kind=c_char), dimension(*), intent(out) :: out
      integer(c_size_t), value :: len
      integer(c_size_t) :: n
    end function
    function c_cuda_available(why, len) bind(C, name="accio_cuda_available") result(rc)
      import :: c_char, c_size_t, c_int
      character(kind=c_char), dimension(*), intent(out) :: why
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function
    function c_device_alloc(device, nbytes, managed, out) bind(C, name="accio_device_alloc") result(rc)
      import :: c_ptr, c_size_t, c_int
      integer(c_int), value :: device, managed
      integer(c_size_t), value :: nbytes
      type(c_ptr), intent(out) :: out
      integer(c_int) :: rc
    end function
    function c_device_free(p) bind(C, name="accio_device_free") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: p
      integer(c_int) :: rc
    end function
    function c_gds_info(detail, len) bind(C, name="accio_gds_info") result(rc)
      import :: c_char, c_size_t, c_int
      character(kind=c_char), dimension(*), intent(out) :: detail
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function
    function c_gds_mode(f, detail, len) bind(C, name="accio_gds_mode") result(rc)
      import :: c_ptr, c_char, c_size_t, c_int
      type(c_ptr), value :: f
      character(kind=c_char), dimension(*), intent(out) :: detail
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function
    function c_open_fd(out, fd, settings) bind(C, name="accio_open_fd") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), intent(out) :: out
      integer(c_int), value :: fd
      type(c_ptr), value :: settings
      integer(c_int) :: rc
    end function
    function c_file_setting(f, name, out, len) bind(C, name="accio_file_setting") result(rc)
      import :: c_ptr, c_char, c_int, c_size_t
      type(c_ptr), value :: f
      character(kind=c_char), dimension(*), intent(in) :: name
      character(kind=c_char), dimension(*), intent(out) :: out
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function
    function c_mechanism_for_at(f, buf, nbytes, offset, op) bind(C, name="accio_mechanism_for_at") result(p)
      import :: c_ptr, c_size_t, c_int64_t, c_int
      type(c_ptr), value :: f, buf
      integer(c_size_t), value :: nbytes
      integer(c_int64_t), value :: offset
      integer(c_int), value :: op
      type(c_ptr) :: p
    end function
    function c_file_plans(f, out, max) bind(C, name="accio_file_plans") result(n)
      import :: c_ptr, c_int, accio_plan_stat
      type(c_ptr), value :: f
      type(accio_plan_stat), dimension(*), intent(out) :: out
      integer(c_int), value :: max
      integer(c_int) :: n
    end function
    function c_future_on_complete(fut, fn, arg) bind(C, name="accio_future_on_complete") result(rc)
      import :: c_ptr, c_funptr, c_int
      type(c_ptr), value :: fut, arg
      type(c_funptr), value :: fn
      integer(c_int) :: rc
    end function
    function c_mechanism_available(id, why, len) bind(C, name="accio_mechanism_available") result(rc)
      import :: c_char, c_size_t, c_int
      integer(c_int), value :: id
      character(kind=c_char), dimension(*), intent(out) :: why
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function
    function c_mechanism_knob(id, k) bind(C, name="accio_mechanism_knob") result(p)
      import :: c_ptr, c_int
      integer(c_int), value :: id, k
      type(c_ptr) :: p
    end function
    function c_setting_name(i) bind(C, name="accio_setting_name") result(p)
      import :: c_ptr, c_int
      integer(c_int), value :: i
      type(c_ptr) :: p
    end function
    function c_setting_env(i) bind(C, name="accio_setting_env") result(p)
      import :: c_ptr, c_int
      integer(c_int), value :: i
      type(c_ptr) :: p
    end function
    function c_setting_doc(i) bind(C, name="accio_setting_doc") result(p)
      import :: c_ptr, c_int
      integer(c_int), value :: i
      type(c_ptr) :: p
    end function
    function c_setting_register(spec) bind(C, name="accio_setting_register") result(rc)
      import :: c_int, accio_setting_spec
      type(accio_setting_spec), intent(in) :: spec
      integer(c_int) :: rc
    end function
    function c_plan_describe(plan_json, label, len, needs_alignment) bind(C, name="accio_plan_describe") result(n)
      import :: c_char, c_size_t, c_int, c_int64_t
      character(kind=c_char), dimension(*), intent(in) :: plan_json
      character(kind=c_char), dimension(*), intent(out) :: label
      integer(c_size_t), value :: len
      integer(c_int), intent(out) :: needs_alignment
      integer(c_int64_t) :: n
    end function
    function c_profile_describe(text, source, out, len) bind(C, name="accio_profile_describe") result(n)
      import :: c_ptr, c_char, c_size_t, c_int64_t
      type(c_ptr), value :: text, source
      character(kind=c_char), dimension(*), intent(out) :: out
      integer(c_size_t), value :: len
      integer(c_int64_t) :: n
    end function
    function c_profile_key_of(path, out) bind(C, name="accio_profile_key_of") result(rc)
      import :: c_char, c_int, accio_profile_key
      character(kind=c_char), dimension(*), intent(in) :: path
      type(accio_profile_key), intent(out) :: out
      integer(c_int) :: rc
    end function
    function c_prefetch_window(fd, settings) bind(C, name="accio_prefetch_window") result(n)
      import :: c_ptr, c_int, c_int64_t
      integer(c_int), value :: fd
      type(c_ptr), value :: settings
      integer(c_int64_t) :: n
    end function
    function c_probe(feature, path, detail, len) bind(C, name="accio_probe") result(rc)
      import :: c_ptr, c_char, c_size_t, c_int
      character(kind=c_char), dimension(*), intent(in) :: feature
      type(c_ptr), value :: path
      character(kind=c_char), dimension(*), intent(out) :: detail
      integer(c_size_t), value :: len
      integer(c_int) :: rc
    end function
    subroutine c_set_log_callback(fn, user) bind(C, name="accio_set_log_callback")
      import :: c_ptr, c_funptr
      type(c_funptr), value :: fn
      type(c_ptr), value :: user
    end subroutine
    function c_log(level, key, message) bind(C, name="accio_log") result(rc)
      import :: c_char, c_int
      integer(c_int), value :: level
      character(kind=c_char), dimension(*), intent(in) :: key, message
      integer(c_int) :: rc
    end function
    function c_cuda_copy_seconds(device, to_device, nbytes, chunk, threads, seconds) &
        bind(C, name="accio_cuda_copy_seconds") result(rc)
      import :: c_int, c_size_t, c_double
      integer(c_int), value :: device, to_device, threads
      integer(c_size_t), value :: nbytes, chunk
      real(c_double), intent(out) :: seconds
      integer(c_int) :: rc
    end function
    function c_cuda_with_device(device, fn, arg) bind(C, name="accio_cuda_with_device") result(rc)
      import :: c_int, c_funptr, c_ptr
      integer(c_int), value :: device
      type(c_funptr), value :: fn
      type(c_ptr), value :: arg
      integer(c_int) :: rc
    end function
    function c_strlen(p) bind(C, name="strlen") result(n)
      import :: c_ptr, c_size_t
      type(c_ptr), value :: p
      integer(c_size_t) :: n
    end function
  end interface

contains

  ! A Fortran string as C takes it: trailing blanks dropped (a fixed-length variable's padding) and a
  ! NUL added.
  pure function c_string(s) result(c)
    character(len=*), intent(in) :: s
    character(kind=c_char, len=len_trim(s) + 1) :: c
    c = trim(s) // c_null_char
  end function

  ! A C string that accio owns, copied into a Fortran one ("" for a null pointer).
  function f_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    if (.not. c_associated(p)) then
      s = ""
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function

  ! What a C out-buffer of `len` characters holds, up to its NUL.
  function from_buffer(b) result(s)
    character(kind=c_char), intent(in) :: b(:)
    character(len=:), allocatable :: s
    integer :: i, n
    n = 0
    do while (n < size(b))
      if (b(n + 1) == c_null_char) exit
      n = n + 1
    end do
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = b(i)
    end do
  end function

  ! The address of a buffer, or .false. (and accio_last_error() saying why) when it is not contiguous:
  ! C reads and writes nbytes from one address, and a strided section's copy would be freed before
  ! an asynchronous request is done with it.
  logical function address_of(buf, nbytes, op, p)
    type(*), dimension(..), intent(in), target :: buf
    integer(c_size_t), intent(in) :: nbytes
    character(len=*), intent(in) :: op
    type(c_ptr), intent(out) :: p
    integer(c_int) :: rc
    p = c_null_ptr
    address_of = is_contiguous(buf)
    if (.not. address_of) then
      rc = c_set_last_error(EINVAL, c_string(op), c_null_ptr, c_string("the buffer is not contiguous (a strided &
                            &section): copy it to a contiguous array first"))
      return
    end if
    if (nbytes > 0) p = c_loc(buf)
  end function

  ! accio_bytes(x): the bytes of a variable of an intrinsic type (integers of 1 to 8 bytes, float and
  ! double, their complexes, logical, logical(c_bool), character; any rank, a scalar or a string
  ! too): storage_size * size / 8. Not c_long_double, whose kind is c_double's on some platforms
  ! (two specifics would clash) and none on others: write storage_size(x, c_size_t) / 8 * size(x). For a derived type, storage_size(x) / 8 *
  ! size(x). (One specific per type and kind, not class(*): gfortran 12 gives a class(*) character
  ! string a storage size of one character.)
  function bytes_i1(x) result(n)
    integer(c_int8_t), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_i2(x) result(n)
    integer(c_int16_t), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_i4(x) result(n)
    integer(c_int32_t), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_i8(x) result(n)
    integer(c_int64_t), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_r4(x) result(n)
    real(c_float), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_r8(x) result(n)
    real(c_double), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_c4(x) result(n)
    complex(c_float_complex), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_c8(x) result(n)
    complex(c_double_complex), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_l(x) result(n)
    logical, dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_lc(x) result(n)
    logical(c_bool), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function
  function bytes_ch(x) result(n)
    character(len=*), dimension(..), intent(in) :: x
    integer(c_size_t) :: n
    n = storage_size(x, c_size_t) / 8 * int(size(x), c_size_t)
  end function

  ! Opens path with mode ("r", "r+", "w", "w+", "a", "a+", "x", "x+"); f is the handle. settings: from
  ! accio_settings_new (optional: defaults + environment). 0, or -errno (accio_last_error() says why).
  function accio_open(f, path, mode, settings) result(rc)
    type(c_ptr), intent(out) :: f
    character(len=*), intent(in) :: path, mode
    type(c_ptr), intent(in), optional :: settings
    integer(c_int) :: rc
    rc = c_open(f, c_string(path), c_string(mode), or_null(settings))
  end function

  ! Waits for requests in flight and frees f, which becomes c_null_ptr (a second close is 0).
  function accio_close(f) result(rc)
    type(c_ptr), intent(inout) :: f
    integer(c_int) :: rc
    rc = 0
    if (c_associated(f)) rc = c_close(f)
    f = c_null_ptr
  end function

  ! bytes read (short only at end of file), or -errno
  function accio_pread(f, buf, nbytes, offset) result(n)
    type(c_ptr), intent(in) :: f
    type(*), dimension(..), intent(inout), target :: buf
    integer(c_size_t), intent(in) :: nbytes
    integer(c_int64_t), intent(in) :: offset
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = -EINVAL
    if (address_of(buf, nbytes, "pread", p)) n = accio_pread_ptr(f, p, nbytes, offset)
  end function

  ! nbytes, or -errno
  function accio_pwrite(f, buf, nbytes, offset) result(n)
    type(c_ptr), intent(in) :: f
    type(*), dimension(..), intent(in), target :: buf
    integer(c_size_t), intent(in) :: nbytes
    integer(c_int64_t), intent(in) :: offset
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = -EINVAL
    if (address_of(buf, nbytes, "pwrite", p)) n = accio_pwrite_ptr(f, p, nbytes, offset)
  end function

  ! the offset written at, or -errno
  function accio_append(f, buf, nbytes) result(at)
    type(c_ptr), intent(in) :: f
    type(*), dimension(..), intent(in), target :: buf
    integer(c_size_t), intent(in) :: nbytes
    integer(c_int64_t) :: at
    type(c_ptr) :: p
    at = -EINVAL
    if (address_of(buf, nbytes, "append", p)) at = c_append(f, p, nbytes)
  end function

  ! 0 with a future in fut, or -errno (fut c_null_ptr); buf is in use until accio_future_wait returns
  function accio_pread_async(f, buf, nbytes, offset, fut) result(rc)
    type(c_ptr), intent(in) :: f
    type(*), dimension(..), intent(inout), target, asynchronous :: buf
    integer(c_size_t), intent(in) :: nbytes
    integer(c_int64_t), intent(in) :: offset
    type(c_ptr), intent(out) :: fut
    integer(c_int) :: rc
    type(c_ptr) :: p
    fut = c_null_ptr
    rc = -EINVAL
    if (address_of(buf, nbytes, "pread_async", p)) rc = c_pread_async(f, p, nbytes, offset, fut)
  end function

  function accio_pwrite_async(f, buf, nbytes, offset, fut) result(rc)
    type(c_ptr), intent(in) :: f
    type(*), dimension(..), intent(in), target, asynchronous :: buf
    integer(c_size_t), intent(in) :: nbytes
    integer(c_int64_t), intent(in) :: offset
    type(c_ptr), intent(out) :: fut
    integer(c_int) :: rc
    type(c_ptr) :: p
    fut = c_null_ptr
    rc = -EINVAL
    if (address_of(buf, nbytes, "pwrite_async", p)) rc = c_pwrite_async(f, p, nbytes, offset, fut)
  end function

  ! Submits size(reqs) requests (op: ACCIO_OP_READ or ACCIO_OP_WRITE) at once; futures(i) gets
  ! request i's future (all or none). 0 or -errno.
  function accio_submit(f, op, reqs, futures) result(rc)
    type(c_ptr), intent(in) :: f
    integer(c_int), intent(in) :: op
    type(accio_request), intent(in) :: reqs(:)
    type(c_ptr), intent(out) :: futures(size(reqs))
    integer(c_int) :: rc
    futures = c_null_ptr
    rc = c_submit(f, op, reqs, size(reqs, kind=c_size_t), futures)
  end function

  ! Waits for the request if it still runs, frees it; fut becomes c_null_ptr.
  subroutine accio_future_free(fut)
    type(c_ptr), intent(inout) :: fut
    if (c_associated(fut)) call c_future_free(fut)
    fut = c_null_ptr
  end subroutine

  subroutine accio_settings_free(s)
    type(c_ptr), intent(inout) :: s
    if (c_associated(s)) call c_settings_free(s)
    s = c_null_ptr
  end subroutine

  ! 0, or -EINVAL for memory accio_host_alloc did not give; p becomes c_null_ptr.
  function accio_host_free(p) result(rc)
    type(c_ptr), intent(inout) :: p
    integer(c_int) :: rc
    rc = c_host_free(p)
    if (rc == 0) p = c_null_ptr
  end function

  ! Sets one setting ("mechanism", "threads", ...: docs/api.md), value as text ("parallel", "8",
  ! "4MiB"). 0, or -EINVAL (accio_last_error() says why).
  function accio_settings_set(s, name, value) result(rc)
    type(c_ptr), intent(in) :: s
    character(len=*), intent(in) :: name, value
    integer(c_int) :: rc
    rc = c_settings_set(s, c_string(name), c_string(value))
  end function

  ! The value of one setting as text (s c_null_ptr: what accio_settings_new would give); "" on error,
  ! with rc (optional) the negative errno.
  function accio_settings_get(s, name, rc) result(value)
    type(c_ptr), intent(in) :: s
    character(len=*), intent(in) :: name
    integer(c_int), intent(out), optional :: rc
    character(len=:), allocatable :: value
    value = setting_text(c_settings_get, s, name, rc)
  end function

  ! The mechanism a request of nbytes (op: ACCIO_OP_READ or ACCIO_OP_WRITE) would run on f; "" on
  ! error.
  function accio_mechanism_for(f, nbytes, op) result(name)
    type(c_ptr), intent(in) :: f
    integer(c_size_t), intent(in) :: nbytes
    integer(c_int), intent(in) :: op
    character(len=:), allocatable :: name
    name = f_string(c_mechanism_for(f, nbytes, op))
  end function

  ! The plan a request of nbytes at offset, from buf (optional: an aligned buffer when absent), would
  ! run now, and why. 0 or -errno (plan and why "").
  function accio_explain(f, nbytes, offset, op, plan, why, buf) result(rc)
    type(c_ptr), intent(in) :: f
    integer(c_size_t), intent(in) :: nbytes
    integer(c_int64_t), intent(in) :: offset
    integer(c_int), intent(in) :: op
    character(len=:), allocatable, intent(out) :: plan, why
    type(*), dimension(..), intent(in), target, optional :: buf
    integer(c_int) :: rc
    character(kind=c_char), allocatable :: p(:), w(:)
    logical :: grew_p, grew_w
    type(c_ptr) :: b
    b = c_null_ptr
    rc = -EINVAL
    if (present(buf)) then
      if (.not. address_of(buf, nbytes, "explain", b)) then
        plan = ""
        why = ""
        return
      end if
    end if
    do  ! again as long as a text fills its buffer (both looked at: .or. may stop at the first)
      grew_p = refill(p)
      grew_w = refill(w)
      if (.not. (grew_p .or. grew_w)) exit
      rc = c_explain(f, b, nbytes, offset, op, p, size(p, kind=c_size_t), w, size(w, kind=c_size_t))
      if (rc /= 0) exit
    end do
    plan = from_buffer(p)
    why = from_buffer(w)
  end function

  ! A setting's value through a C getter of accio_settings_get's shape (the handle h: settings or a
  ! file), whole however long; "" on error, with rc (when present) the negative errno or 0. (getter
  ! is a C function: passing it needs no trampoline.)
  function setting_text(getter, h, name, rc) result(value)
    procedure(c_settings_get) :: getter
    type(c_ptr), intent(in) :: h
    character(len=*), intent(in) :: name
    integer(c_int), intent(out), optional :: rc
    character(len=:), allocatable :: value
    character(kind=c_char), allocatable :: out(:)
    integer(c_int) :: r
    allocate (out(4096))
    r = getter(h, c_string(name), out, size(out, kind=c_size_t))
    if (grow(out, int(r, c_int64_t))) r = getter(h, c_string(name), out, size(out, kind=c_size_t))
    value = ""
    if (r >= 0) value = from_buffer(out)
    if (present(rc)) rc = min(r, 0_c_int)
  end function

  ! After a C call that wrote text into out and returned its full length n (or -errno): .true. when
  ! it did not fit, with out made large enough, so that the caller calls again.
  logical function grow(out, n)
    character(kind=c_char), allocatable, intent(inout) :: out(:)
    integer(c_int64_t), intent(in) :: n
    grow = n >= size(out, kind=c_int64_t)
    if (grow) then
      deallocate (out)
      allocate (out(n + 1))
    end if
  end function

  ! After a C call that cut its text to fit out and returned a status, not a length: .true. when the
  ! text filled out (it may have been cut), with out made twice as large and emptied, so that the
  ! caller calls again; out starts empty (allocated here when it is not yet).
  logical function refill(out)
    character(kind=c_char), allocatable, intent(inout) :: out(:)
    integer :: n
    if (.not. allocated(out)) then
      allocate (out(1024))
      out(1) = c_null_char
      refill = .true.
      return
    end if
    refill = out(size(out)) == c_null_char .and. all(out(:size(out) - 1) /= c_null_char)
    if (refill) then
      n = 2 * size(out)
      deallocate (out)
      allocate (out(n))
      out(1) = c_null_char
    end if
  end function

  ! An optional address as C takes it: c_null_ptr when absent.
  function or_null(p) result(q)
    type(c_ptr), intent(in), optional :: p
    type(c_ptr) :: q
    q = c_null_ptr
    if (present(p)) q = p
  end function

  ! A Fortran string (trailing blanks dropped) as a NUL-terminated character array, whose address
  ! (c_loc) C can use for as long as the array lives.
  pure subroutine to_chars(s, a)
    character(len=*), intent(in) :: s
    character(kind=c_char), allocatable, intent(out) :: a(:)
    integer :: i
    allocate (a(len_trim(s) + 1))
    do i = 1, len_trim(s)
      a(i) = s(i:i)
    end do
    a(len_trim(s) + 1) = c_null_char
  end subroutine

  ! Opens the file that descriptor fd refers to, with fd's access mode (reopened: fd is neither used
  ! nor closed). 0, or -errno.
  function accio_open_fd(f, fd, settings) result(rc)
    type(c_ptr), intent(out) :: f
    integer(c_int), intent(in) :: fd
    type(c_ptr), intent(in), optional :: settings
    integer(c_int) :: rc
    rc = c_open_fd(f, fd, or_null(settings))
  end function

  ! The value of one setting of an open file as text; "" on error, with rc (optional) the negative errno.
  function accio_file_setting(f, name, rc) result(value)
    type(c_ptr), intent(in) :: f
    character(len=*), intent(in) :: name
    integer(c_int), intent(out), optional :: rc
    character(len=:), allocatable :: value
    value = setting_text(c_file_setting, f, name, rc)
  end function

  ! The mechanism a request of nbytes at offset would run now (op: ACCIO_OP_READ or ACCIO_OP_WRITE,
  ! optionally + ACCIO_OP_FRESH_CACHE), from buf (optional: an aligned buffer when absent), the
  ! decision a request makes (size, alignment, concurrency, page-cache residency); "" on error.
  function accio_mechanism_for_at(f, nbytes, offset, op, buf) result(name)
    type(c_ptr), intent(in) :: f
    integer(c_size_t), intent(in) :: nbytes
    integer(c_int64_t), intent(in) :: offset
    integer(c_int), intent(in) :: op
    type(*), dimension(..), intent(in), target, optional :: buf
    character(len=:), allocatable :: name
    type(c_ptr) :: p
    name = ""
    p = c_null_ptr
    if (present(buf)) then
      if (.not. address_of(buf, nbytes, "mechanism_for_at", p)) return
    end if
    name = f_string(c_mechanism_for_at(f, p, nbytes, offset, op))
  end function

  ! The plans that served f's requests so far, in plans (as many as it holds); returns how many
  ! there are (more than size(plans) when it was too small), or -errno.
  function accio_file_plans(f, plans) result(n)
    type(c_ptr), intent(in) :: f
    type(accio_plan_stat), intent(out) :: plans(:)
    integer(c_int) :: n
    n = c_file_plans(f, plans, size(plans, kind=c_int))
  end function

  ! Calls fn(fut, result, arg) once when the request completes (on the worker that completed it, or
  ! at once when it is done already): a module (or external) procedure, and arg c_loc of a variable
  ! that outlives the request. 0, -EBUSY when fut has a callback already, -EINVAL.
  function accio_future_on_complete(fut, fn, arg) result(rc)
    type(c_ptr), intent(in) :: fut
    procedure(accio_future_callback) :: fn
    type(c_ptr), intent(in), optional :: arg
    integer(c_int) :: rc
    rc = c_future_on_complete(fut, c_funloc(fn), or_null(arg))
  end function

  ! 1 when mechanism id runs on this machine, 0 when not (why, optional, says what is missing),
  ! -EINVAL for an unknown id.
  function accio_mechanism_available(id, why) result(yes)
    integer(c_int), intent(in) :: id
    character(len=:), allocatable, intent(out), optional :: why
    integer(c_int) :: yes
    character(kind=c_char), allocatable :: w(:)
    yes = 0
    do while (refill(w))
      yes = c_mechanism_available(id, w, size(w, kind=c_size_t))
    end do
    if (present(why)) why = from_buffer(w)
  end function

  ! The k-th setting (k from 0) that mechanism id reads ("threads", "queue_depth"); "" past the last.
  function accio_mechanism_knob(id, k) result(name)
    integer(c_int), intent(in) :: id, k
    character(len=:), allocatable :: name
    name = f_string(c_mechanism_knob(id, k))
  end function

  ! Row i of the settings table: its name ("threads"), variable ("ACCIO_THREADS") and text; "" for no
  ! such row.
  function accio_setting_name(i) result(s)
    integer(c_int), intent(in) :: i
    character(len=:), allocatable :: s
    s = f_string(c_setting_name(i))
  end function
  function accio_setting_env(i) result(s)
    integer(c_int), intent(in) :: i
    character(len=:), allocatable :: s
    s = f_string(c_setting_env(i))
  end function
  function accio_setting_doc(i) result(s)
    integer(c_int), intent(in) :: i
    character(len=:), allocatable :: s
    s = f_string(c_setting_doc(i))
  end function

  ! A new row of the settings table (a program's own knob): afterwards accio_settings_new reads its
  ! variable, accio_settings_set/get know it, and accio info lists it. kind: "count", "size",
  ! "bool", "choice" or "text"; min and max bound a count or a size (absent: 0 and
  ! huge(0_c_int64_t)); choices ("a|b") a choice.
  ! 0; -EEXIST when the name is taken by another spec; -EINVAL (accio_last_error() says why).
  function accio_setting_register(name, env, doc, kind, default_value, min, max, choices) result(rc)
    character(len=*), intent(in) :: name, env, doc, kind, default_value
    integer(c_int64_t), intent(in), optional :: min, max
    character(len=*), intent(in), optional :: choices
    integer(c_int) :: rc
    character(kind=c_char), allocatable, target :: n(:), e(:), d(:), k(:), v(:), c(:)
    type(accio_setting_spec) :: spec
    call to_chars(name, n)
    call to_chars(env, e)
    call to_chars(doc, d)
    call to_chars(kind, k)
    call to_chars(default_value, v)
    spec%name = c_loc(n)
    spec%env = c_loc(e)
    spec%doc = c_loc(d)
    spec%kind = c_loc(k)
    spec%default_value = c_loc(v)
    if (present(min)) spec%min = min
    if (present(max)) spec%max = max
    if (present(choices)) then
      call to_chars(choices, c)
      spec%choices = c_loc(c)
    end if
    rc = c_setting_register(spec)
  end function

  ! A plan as a profile writes it ('{"mechanism": "uring", "queue_depth": 16}') as the planner
  ! labels it ("uring(even, qd=16)") in label; needs_alignment (optional): whether its requests need
  ! O_DIRECT alignment. 0, or -EINVAL (label "", accio_last_error() says why).
  function accio_plan_describe(plan_json, label, needs_alignment) result(rc)
    character(len=*), intent(in) :: plan_json
    character(len=:), allocatable, intent(out) :: label
    logical, intent(out), optional :: needs_alignment
    integer(c_int) :: rc
    character(kind=c_char), allocatable :: out(:)
    integer(c_int) :: aligned
    integer(c_int64_t) :: n
    aligned = 0
    allocate (out(256))
    n = c_plan_describe(c_string(plan_json), out, size(out, kind=c_size_t), aligned)
    if (grow(out, n)) n = c_plan_describe(c_string(plan_json), out, size(out, kind=c_size_t), aligned)
    rc = int(min(n, 0_c_int64_t), c_int)
    label = ""
    if (n >= 0) label = from_buffer(out)
    if (present(needs_alignment)) needs_alignment = aligned /= 0
  end function

  ! A profile document as the planner reads it (every plan labelled, the decisions over the
  ! planner's cells), as JSON text. text absent: the built-in model, for the device holding the file
  ! or directory `source` (absent: a device that is not rotational); with text, source names it in
  ! errors. "" on error, with rc (optional) the negative errno and accio_last_error() saying why.
  function accio_profile_describe(text, source, rc) result(doc)
    character(len=*), intent(in), optional :: text, source
    integer(c_int), intent(out), optional :: rc
    character(len=:), allocatable :: doc
    character(kind=c_char), allocatable, target :: t(:), src(:)
    character(kind=c_char), allocatable :: out(:)
    type(c_ptr) :: tp, sp
    integer(c_int64_t) :: n
    tp = c_null_ptr
    sp = c_null_ptr
    if (present(text)) then
      call to_chars(text, t)
      tp = c_loc(t)
    end if
    if (present(source)) then
      call to_chars(source, src)
      sp = c_loc(src)
    end if
    allocate (out(65536))
    n = c_profile_describe(tp, sp, out, size(out, kind=c_size_t))
    if (grow(out, n)) n = c_profile_describe(tp, sp, out, size(out, kind=c_size_t))
    doc = ""
    if (n >= 0) doc = from_buffer(out)
    if (present(rc)) rc = int(min(n, 0_c_int64_t), c_int)
  end function

  ! The profile key of the filesystem holding path (a file or a directory). 0 or -errno.
  function accio_profile_key_of(path, key) result(rc)
    character(len=*), intent(in) :: path
    type(accio_profile_key), intent(out) :: key
    integer(c_int) :: rc
    rc = c_profile_key_of(c_string(path), key)
  end function

  ! The prefetch window (bytes) accio run asks ahead of a sequential reader of the cold file open at
  ! descriptor fd, from the profile auto uses for it (settings optional); 0 for none, or -errno.
  function accio_prefetch_window(fd, settings) result(n)
    integer(c_int), intent(in) :: fd
    type(c_ptr), intent(in), optional :: settings
    integer(c_int64_t) :: n
    n = c_prefetch_window(fd, or_null(settings))
  end function

  ! A feature of this machine: "io_uring", "cachestat", "mincore", "o_direct" (needs path),
  ! "slow_misaligned_copy". 1 yes, 0 no, -errno for a bad request; detail (optional) describes it.
  function accio_probe(feature, path, detail) result(yes)
    character(len=*), intent(in) :: feature
    character(len=*), intent(in), optional :: path
    character(len=:), allocatable, intent(out), optional :: detail
    integer(c_int) :: yes
    character(kind=c_char), allocatable, target :: p(:)
    character(kind=c_char), allocatable :: d(:)
    type(c_ptr) :: pp
    pp = c_null_ptr
    if (present(path)) then
      call to_chars(path, p)
      pp = c_loc(p)
    end if
    yes = 0
    do while (refill(d))
      yes = c_probe(c_string(feature), pp, d, size(d, kind=c_size_t))
    end do
    if (present(detail)) detail = from_buffer(d)
  end function

  ! Sends accio's warnings and errors to fn(level, key, message, user) instead of stderr; without fn,
  ! back to stderr (user is then ignored). fn stays registered until replaced: pass a module (or
  ! external) procedure, and as user c_loc of a variable that outlives the registration.
  subroutine accio_set_log_callback(fn, user)
    procedure(accio_log_callback), optional :: fn
    type(c_ptr), intent(in), optional :: user
    if (present(fn)) then
      call c_set_log_callback(c_funloc(fn), or_null(user))
    else
      call c_set_log_callback(c_null_funptr, c_null_ptr)
    end if
  end subroutine

  ! A message of the program's own into accio's channel (the log callback, or stderr as "accio:
  ! warning: ..."); level ACCIO_LOG_INFO, _WARNING or _ERROR. 0, or -EINVAL.
  function accio_log(level, key, message) result(rc)
    integer(c_int), intent(in) :: level
    character(len=*), intent(in) :: key, message
    integer(c_int) :: rc
    rc = c_log(level, c_string(key), c_string(message))
  end function

  ! The pinned-copy ceiling: seconds for `threads` threads to copy nbytes in all between registered
  ! host buffers of `chunk` bytes and GPU `device` (to_device: host to device). 0 or -errno.
  function accio_cuda_copy_seconds(device, to_device, nbytes, chunk, threads, seconds) result(rc)
    integer(c_int), intent(in) :: device, threads
    logical, intent(in) :: to_device
    integer(c_size_t), intent(in) :: nbytes, chunk
    real(c_double), intent(out) :: seconds
    integer(c_int) :: rc
    seconds = 0
    rc = c_cuda_copy_seconds(device, merge(1_c_int, 0_c_int, to_device), nbytes, chunk, threads, seconds)
  end function

  ! The name of mechanism `id` (accio_stats's last_mechanism): "posix", "staged", ...; "" for an
  ! unknown id.
  function accio_mechanism_name(id) result(name)
    integer(c_int), intent(in) :: id
    character(len=:), allocatable :: name
    name = f_string(c_mechanism_name(id))
  end function

  ! "4096", "4k", "16MiB", "1g" in bytes (binary units), or -EINVAL (accio_last_error() says why).
  function accio_parse_size(text) result(n)
    character(len=*), intent(in) :: text
    integer(c_int64_t) :: n
    n = c_parse_size(c_string(text))
  end function

  ! The warnings issued so far, one per line ("" when none).
  function accio_warnings() result(text)
    character(len=:), allocatable :: text
    character(kind=c_char), allocatable :: out(:)
    integer(c_size_t) :: n
    allocate (out(4096))
    n = c_warnings(out, size(out, kind=c_size_t))
    if (grow(out, int(n, c_int64_t))) n = c_warnings(out, size(out, kind=c_size_t))
    text = from_buffer(out)
  end function

  ! 1 when the CUDA driver loads and reports a GPU; 0 otherwise, with why (optional) saying what is
  ! missing.
  function accio_cuda_available(why) result(yes)
    character(len=:), allocatable, intent(out), optional :: why
    integer(c_int) :: yes
    character(kind=c_char), allocatable :: w(:)
    yes = 0
    do while (refill(w))
      yes = c_cuda_available(w, size(w, kind=c_size_t))
    end do
    if (present(why)) why = from_buffer(w)
  end function

  ! nbytes of GPU memory on GPU `device` in p (managed: memory both the CPU and the GPU address,
  ! cuMemAllocManaged); 0 or -errno (-ENODEV without a driver or with no such GPU).
  function accio_device_alloc(device, nbytes, managed, p) result(rc)
    integer(c_int), intent(in) :: device
    integer(c_size_t), intent(in) :: nbytes
    logical, intent(in) :: managed
    type(c_ptr), intent(out) :: p
    integer(c_int) :: rc
    p = c_null_ptr
    rc = c_device_alloc(device, nbytes, merge(1_c_int, 0_c_int, managed), p)
  end function

  ! 0, or -errno for memory accio_device_alloc did not give; p becomes c_null_ptr.
  function accio_device_free(p) result(rc)
    type(c_ptr), intent(inout) :: p
    integer(c_int) :: rc
    rc = 0
    if (c_associated(p)) rc = c_device_free(p)
    if (rc == 0) p = c_null_ptr
  end function

  ! 1 when cuFile loaded (detail: whether its direct path is possible), 0 when not (detail: why).
  function accio_gds_info(detail) result(yes)
    character(len=:), allocatable, intent(out), optional :: detail
    integer(c_int) :: yes
    character(kind=c_char), allocatable :: d(:)
    yes = 0
    do while (refill(d))
      yes = c_gds_info(d, size(d, kind=c_size_t))
    end do
    if (present(detail)) detail = from_buffer(d)
  end function

  ! For f: 1 when cuFile can take the direct path, 0 when it would run in compatibility mode (no
  ! direct path for the file here, or cuFile took only its buffered descriptor), 2 when cuFile
  ! refuses the file (gds then runs staged for it); -errno on error. detail says why.
  function accio_gds_mode(f, detail) result(mode)
    type(c_ptr), intent(in) :: f
    character(len=:), allocatable, intent(out), optional :: detail
    integer(c_int) :: mode
    character(kind=c_char), allocatable :: d(:)
    mode = 0
    do while (refill(d))
      mode = c_gds_mode(f, d, size(d, kind=c_size_t))
    end do
    if (present(detail)) detail = from_buffer(d)
  end function

  ! Calls fn(arg) in this thread with a context of GPU `device` current (this thread's own where it
  ! is on that GPU, else the GPU's primary context, if the process made it active: accio makes
  ! none), so that a CUDA runtime or library called in fn takes `device` for the current GPU. 0 once
  ! fn returned; -ENODEV without a driver or with no such GPU, -EIO (fn is then not called).
  function accio_cuda_with_device(device, fn, arg) result(rc)
    integer(c_int), intent(in) :: device
    procedure(accio_device_callback) :: fn
    type(c_ptr), intent(in), optional :: arg
    integer(c_int) :: rc
    rc = c_cuda_with_device(device, c_funloc(fn), or_null(arg))
  end function

  ! Records an error for the calling thread as accio's own calls do (a library on top of accio that
  ! refuses its caller's arguments): accio_last_error() then reads "op 'path': detail (errno E)"
  ! (path absent: none; detail absent: strerror's). Returns -errnum; -EINVAL, recording nothing, for
  ! errnum <= 0.
  function accio_set_last_error(errnum, op, path, detail) result(rc)
    integer(c_int), intent(in) :: errnum
    character(len=*), intent(in) :: op
    character(len=*), intent(in), optional :: path, detail
    integer(c_int) :: rc
    character(kind=c_char), allocatable, target :: p(:)
    type(c_ptr) :: pp
    pp = c_null_ptr
    if (present(path)) then
      call to_chars(path, p)
      pp = c_loc(p)
    end if
    if (present(detail)) then
      rc = c_set_last_error(errnum, c_string(op), pp, c_string(detail))
    else
      rc = c_set_last_error(errnum, c_string(op), pp, c_string(""))
    end if
  end function

  function accio_version() result(v)
    character(len=:), allocatable :: v
    v = f_string(c_version())
  end function

  ! The calling thread's last error: "pread '/p' at offset 4096: ... (errno 5)", or "".
  function accio_last_error() result(msg)
    character(len=:), allocatable :: msg
    msg = f_string(c_last_error())
  end function

  function accio_last_error_op() result(op)
    character(len=:), allocatable :: op
    op = f_string(c_last_error_op())
  end function

  function accio_last_error_path() result(path)
    character(len=:), allocatable :: path
    path = f_string(c_last_error_path())
  end function

end module accio
