! accio for Fortran: the C API (accio.h) through iso_c_binding, with Fortran strings where C takes
! NUL-terminated ones. A module source, not a compiled .mod (a .mod file belongs to one compiler and
! its version): compile it with your program, before the files that `use accio`:
!
!   gfortran $(accio config --fortran) app.f90 $(accio config --libs)
!
! Needs Fortran 2018's assumed-type arrays (type(*), dimension(*): gfortran 4.9 and later, ifx,
! nvfortran, flang), so that one pread and one pwrite take arrays of any type and kind. Sizes and
! offsets are in bytes (integer(c_size_t), integer(c_int64_t)); results are as in C: bytes moved, or
! a negative errno, with accio_last_error() saying which operation, path, offset and why.
!
!   use accio
!   type(c_ptr) :: f
!   real(8) :: field(1000, 1000)
!   if (accio_open(f, "checkpoint.bin", "w") /= 0) error stop accio_last_error()
!   n = accio_pwrite(f, field, storage_size(field, c_size_t) / 8 * size(field, kind=c_size_t), 0_c_int64_t)
!   rc = accio_close(f)
!
! Buffers in GPU memory (CUDA Fortran's device arrays, OpenACC/OpenMP device pointers through
! c_ptr) are taken as in C: the driver says where a buffer lives. An asynchronous request keeps
! using its buffer until accio_future_wait returns: give the array the ASYNCHRONOUS attribute, as
! for MPI_Isend, so that the compiler does not move it or read it early.
module accio
  use, intrinsic :: iso_c_binding, only: c_ptr, c_null_ptr, c_char, c_null_char, c_int, c_int64_t, &
                                         c_size_t, c_associated, c_f_pointer
  implicit none
  private

  public :: c_ptr, c_null_ptr, c_int, c_int64_t, c_size_t, c_associated
  public :: ACCIO_OP_READ, ACCIO_OP_WRITE
  public :: accio_version, accio_last_error, accio_last_errno
  public :: accio_settings_new, accio_settings_set, accio_settings_free
  public :: accio_open, accio_close, accio_pread, accio_pwrite, accio_append, accio_fsync, accio_size
  public :: accio_mechanism_for
  public :: accio_pread_async, accio_pwrite_async, accio_future_wait, accio_future_ready, accio_future_free

  integer(c_int), parameter :: ACCIO_OP_READ = 0, ACCIO_OP_WRITE = 1

  ! The C functions that take no string, as they are.
  interface
    ! accio_settings* accio_settings_new(void): defaults + environment; c_null_ptr on a bad ACCIO_* value
    function accio_settings_new() bind(C, name="accio_settings_new") result(s)
      import :: c_ptr
      type(c_ptr) :: s
    end function
    subroutine accio_settings_free(s) bind(C, name="accio_settings_free")
      import :: c_ptr
      type(c_ptr), value :: s
    end subroutine
    ! 0 or -errno; waits for requests in flight and frees f
    function accio_close(f) bind(C, name="accio_close") result(rc)
      import :: c_ptr, c_int
      type(c_ptr), value :: f
      integer(c_int) :: rc
    end function
    ! bytes read (short only at end of file), or -errno
    function accio_pread(f, buf, size, offset) bind(C, name="accio_pread") result(n)
      import :: c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: f
      type(*), dimension(*), intent(inout) :: buf
      integer(c_size_t), value :: size
      integer(c_int64_t), value :: offset
      integer(c_int64_t) :: n
    end function
    ! size, or -errno
    function accio_pwrite(f, buf, size, offset) bind(C, name="accio_pwrite") result(n)
      import :: c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: f
      type(*), dimension(*), intent(in) :: buf
      integer(c_size_t), value :: size
      integer(c_int64_t), value :: offset
      integer(c_int64_t) :: n
    end function
    ! the offset written at, or -errno
    function accio_append(f, buf, size) bind(C, name="accio_append") result(at)
      import :: c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: f
      type(*), dimension(*), intent(in) :: buf
      integer(c_size_t), value :: size
      integer(c_int64_t) :: at
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
    ! 0 with a future in fut, or -errno; the buffer is in use until accio_future_wait returns
    function accio_pread_async(f, buf, size, offset, fut) bind(C, name="accio_pread_async") result(rc)
      import :: c_ptr, c_size_t, c_int64_t, c_int
      type(c_ptr), value :: f
      type(*), dimension(*), intent(inout), asynchronous :: buf
      integer(c_size_t), value :: size
      integer(c_int64_t), value :: offset
      type(c_ptr), intent(out) :: fut
      integer(c_int) :: rc
    end function
    function accio_pwrite_async(f, buf, size, offset, fut) bind(C, name="accio_pwrite_async") result(rc)
      import :: c_ptr, c_size_t, c_int64_t, c_int
      type(c_ptr), value :: f
      type(*), dimension(*), intent(in), asynchronous :: buf
      integer(c_size_t), value :: size
      integer(c_int64_t), value :: offset
      type(c_ptr), intent(out) :: fut
      integer(c_int) :: rc
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
    subroutine accio_future_free(fut) bind(C, name="accio_future_free")
      import :: c_ptr
      type(c_ptr), value :: fut
    end subroutine
    function accio_last_errno() bind(C, name="accio_last_errno") result(e)
      import :: c_int
      integer(c_int) :: e
    end function
  end interface

  ! The C functions behind the Fortran-string wrappers below.
  interface
    function c_open(out, path, mode, settings) bind(C, name="accio_open") result(rc)
      import :: c_ptr, c_char, c_int
      type(c_ptr), intent(out) :: out
      character(kind=c_char), dimension(*), intent(in) :: path, mode
      type(c_ptr), value :: settings
      integer(c_int) :: rc
    end function
    function c_settings_set(s, name, value) bind(C, name="accio_settings_set") result(rc)
      import :: c_ptr, c_char, c_int
      type(c_ptr), value :: s
      character(kind=c_char), dimension(*), intent(in) :: name, value
      integer(c_int) :: rc
    end function
    function c_mechanism_for(f, size, op) bind(C, name="accio_mechanism_for") result(p)
      import :: c_ptr, c_size_t, c_int
      type(c_ptr), value :: f
      integer(c_size_t), value :: size
      integer(c_int), value :: op
      type(c_ptr) :: p
    end function
    function c_version() bind(C, name="accio_version") result(p)
      import :: c_ptr
      type(c_ptr) :: p
    end function
    function c_last_error() bind(C, name="accio_last_error") result(p)
      import :: c_ptr
      type(c_ptr) :: p
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

  ! Opens path with mode ("r", "r+", "w", "w+", "a", "a+"); f is the handle. settings: from
  ! accio_settings_new (optional: defaults + environment). 0, or -errno (accio_last_error() says why).
  function accio_open(f, path, mode, settings) result(rc)
    type(c_ptr), intent(out) :: f
    character(len=*), intent(in) :: path, mode
    type(c_ptr), intent(in), optional :: settings
    integer(c_int) :: rc
    type(c_ptr) :: s
    s = c_null_ptr
    if (present(settings)) s = settings
    rc = c_open(f, c_string(path), c_string(mode), s)
  end function

  ! Sets one setting ("mechanism", "threads", ...: docs/api.md), value as text ("parallel", "8",
  ! "4MiB"). 0, or -EINVAL (accio_last_error() says why).
  function accio_settings_set(s, name, value) result(rc)
    type(c_ptr), intent(in) :: s
    character(len=*), intent(in) :: name, value
    integer(c_int) :: rc
    rc = c_settings_set(s, c_string(name), c_string(value))
  end function

  ! The mechanism a request of size bytes (op: ACCIO_OP_READ or ACCIO_OP_WRITE) would run on f; "" on
  ! error.
  function accio_mechanism_for(f, size, op) result(name)
    type(c_ptr), intent(in) :: f
    integer(c_size_t), intent(in) :: size
    integer(c_int), intent(in) :: op
    character(len=:), allocatable :: name
    name = f_string(c_mechanism_for(f, size, op))
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

end module accio
