! The C API from Fortran through the accio module (include/accio/accio.f90), linked against the
! shared libaccio as a Fortran program would be: a checkpoint of a real(8) field written and read
! back whole (settings from Fortran strings with trailing blanks), a slice at an offset into another
! type, append, size, fsync, an asynchronous write and read, the mechanism that would run, and the
! error paths (a missing file, a bad setting: negative errno and the message naming them).
!
!   fortran_api DIR
program fortran_api
  use accio
  use, intrinsic :: iso_fortran_env, only: int8, int64
  implicit none
  integer, parameter :: n = 300000
  character(len=4096) :: dir
  character(len=256) :: path  ! trailing blanks: the module trims them
  real(8), allocatable :: field(:), back(:)
  real(8) :: two(2)
  integer(int8), allocatable, asynchronous :: bytes(:), bytes_back(:)
  type(c_ptr) :: f, s, fut
  integer(c_size_t) :: nbytes
  integer(c_int64_t) :: got
  integer :: i, failures

  failures = 0
  if (command_argument_count() /= 1) error stop "usage: fortran_api DIR"
  call get_command_argument(1, dir)
  path = trim(dir) // "/fortran.bin"
  allocate (field(n), back(n), bytes(3 * 1048576 + 7), bytes_back(3 * 1048576 + 7))
  do i = 1, n
    field(i) = real(i, 8) * 0.5d0
  end do
  nbytes = int(n, c_size_t) * 8_c_size_t

  call check(len(accio_version()) > 0, "accio_version")

  s = accio_settings_new()
  call check(c_associated(s), "accio_settings_new")
  call check(accio_settings_set(s, "mechanism", "parallel") == 0, "settings_set mechanism")
  call check(accio_settings_set(s, "threads   ", "3") == 0, "settings_set threads (a name with blanks)")

  call check(accio_open(f, path, "w+", s) == 0, "open w+: " // accio_last_error())
  call check(accio_pwrite(f, field, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "pwrite the field")
  call check(accio_fsync(f) == 0, "fsync")
  call check(accio_size(f) == int(nbytes, c_int64_t), "size after pwrite")
  back = 0
  call check(accio_pread(f, back, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "pread the field")
  call check(same(back, field), "the field read back, bit for bit")
  ! a slice: 16 bytes at the offset of field(11) into two reals
  call check(accio_pread(f, two, 16_c_size_t, 80_c_int64_t) == 16, "pread at an offset")
  call check(same(two, field(11:12)), "the slice read back")
  ! reads past the end are short
  call check(accio_pread(f, back, nbytes, int(nbytes, c_int64_t) - 8) == 8, "pread across the end")
  call check(accio_mechanism_for(f, 64_c_size_t * 1048576_c_size_t, ACCIO_OP_READ) == "parallel", &
             "mechanism_for: " // accio_mechanism_for(f, 64_c_size_t * 1048576_c_size_t, ACCIO_OP_READ))
  call check(accio_close(f) == 0, "close")

  ! append, and an asynchronous write and read of bytes (another type through the same functions)
  do i = 1, size(bytes)
    bytes(i) = int(mod(i * 7, 251) - 125, int8)
  end do
  call check(accio_open(f, path, "a+") == 0, "open a+: " // accio_last_error())
  call check(accio_append(f, field, 8_c_size_t) == int(nbytes, c_int64_t), "append at the end")
  call check(accio_pwrite_async(f, bytes, size(bytes, kind=c_size_t), 0_c_int64_t, fut) == 0, "pwrite_async")
  got = accio_future_wait(fut)
  call check(got == size(bytes, kind=c_int64_t), "pwrite_async's result")
  call accio_future_free(fut)
  call check(accio_pread_async(f, bytes_back, size(bytes, kind=c_size_t), 0_c_int64_t, fut) == 0, "pread_async")
  call check(accio_future_ready(fut, 10000000000_c_int64_t) == 1, "future_ready")
  call check(accio_future_wait(fut) == size(bytes, kind=c_int64_t), "pread_async's result")
  call accio_future_free(fut)
  call check(all(bytes_back == bytes), "the bytes read back")
  call check(accio_close(f) == 0, "close a+")
  call accio_settings_free(s)

  ! errors: a negative errno, and the message names the operation and the path
  call check(accio_open(f, trim(dir) // "/no/such/file", "r") == -2, "open of a missing file is -ENOENT")
  call check(accio_last_errno() == 2, "last_errno")
  call check(index(accio_last_error(), trim(dir) // "/no/such/file") > 0, "the error names the path: " // &
             accio_last_error())
  s = accio_settings_new()
  call check(accio_settings_set(s, "threads", "lots") == -22, "a bad setting is -EINVAL")
  call check(index(accio_last_error(), "lots") > 0, "the error names the value: " // accio_last_error())
  call check(accio_settings_set(s, "no_such_setting", "1") == -22, "an unknown setting is -EINVAL")
  call accio_settings_free(s)

  if (failures > 0) error stop "fortran_api: checks failed"
  print '(a)', "fortran_api: ok"

contains

  ! Bit for bit, as the bytes were written (no floating-point comparison).
  logical function same(a, b)
    real(8), intent(in) :: a(:), b(:)
    same = size(a) == size(b)
    if (same) same = all(transfer(a, 0_int64, size(a)) == transfer(b, 0_int64, size(b)))
  end function

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(2a)', "FAILED: ", what
      failures = failures + 1
    end if
  end subroutine

end program fortran_api
