! The C API from Fortran through the accio module (include/accio/accio.f90), linked against the
! shared libaccio as a Fortran program would be: a checkpoint of a real(8) field written and read
! back bit for bit (settings from Fortran strings with trailing blanks), a header of scalars and a
! character string, a slice at an offset, a read across the end, append, size, fsync, statistics,
! explain; asynchronous requests from a contiguous array and from an assumed-shape dummy, a strided
! section refused (-EINVAL, with a message) where C would have been given a temporary copy, a batch
! (accio_submit), page-locked memory read through accio_pread_ptr; handles set to c_null_ptr when
! closed or freed; and the error paths (a missing file, a bad setting: negative errno and a message
! naming them).
!
!   fortran_api DIR
program fortran_api
  use accio
  use, intrinsic :: iso_fortran_env, only: int8, int32, int64
  implicit none
  integer, parameter :: n = 300000
  character(len=4096) :: dir
  character(len=256) :: path  ! trailing blanks: the module trims them
  real(8), allocatable :: field(:), back(:)
  real(8), allocatable, asynchronous :: grid(:, :)
  real(8) :: two(2), time, time_back
  integer(int32) :: step, step_back
  character(len=12) :: label, label_back
  integer(int8), allocatable, asynchronous, target :: bytes(:), bytes_back(:)
  integer(int8), pointer :: pinned(:)
  type(c_ptr) :: f, s, fut, futures(2), mem
  type(accio_request) :: reqs(2)
  type(accio_stats) :: st
  character(len=:), allocatable :: plan, why, text
  integer(c_size_t) :: nbytes
  integer(c_int64_t) :: got, cached, dirty, total
  integer(c_int) :: rc, how
  integer :: i, failures

  failures = 0
  if (command_argument_count() /= 1) error stop "usage: fortran_api DIR"
  call get_command_argument(1, dir)
  path = trim(dir) // "/fortran.bin"
  allocate (field(n), back(n), bytes(3 * 1048576 + 7), bytes_back(3 * 1048576 + 7), grid(64, 1000))
  do i = 1, n
    field(i) = real(i, 8) * 0.5d0
  end do
  nbytes = accio_bytes(field)
  call check(nbytes == int(n, c_size_t) * 8, "accio_bytes of a real(8) array")
  call check(accio_bytes(step) == 4 .and. accio_bytes(label) == 12 .and. accio_bytes(grid) == 64 * 1000 * 8, &
             "accio_bytes of a scalar, a string, a rank-2 array")
  call check(len(accio_version()) > 0, "accio_version")

  s = accio_settings_new()
  call check(c_associated(s), "accio_settings_new")
  call check(accio_settings_set(s, "mechanism", "parallel") == 0, "settings_set mechanism")
  call check(accio_settings_set(s, "threads   ", "3") == 0, "settings_set threads (a name with blanks)")
  call check(accio_settings_get(s, "threads") == "3", "settings_get threads")
  text = accio_settings_get(s, "no_such_setting", rc)
  call check(text == "" .and. rc == -22, "settings_get of an unknown setting")

  rc = accio_open(f, path, "w+", s)
  call check(rc == 0, "open w+: " // accio_last_error())
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
  text = accio_mechanism_for(f, 64_c_size_t * 1048576_c_size_t, ACCIO_OP_READ)
  call check(text == "parallel", "mechanism_for: " // text)
  rc = accio_explain(f, 64_c_size_t * 1048576_c_size_t, 0_c_int64_t, ACCIO_OP_READ, plan, why)
  call check(rc == 0 .and. index(plan, "parallel") == 1 .and. len(why) > 0, "explain: " // plan // ": " // why)
  call check(accio_file_stats(f, st) == 0, "file_stats")
  call check(st%writes >= 1 .and. st%bytes_written == int(nbytes, c_int64_t) .and. st%reads >= 3 .and. &
             st%fsyncs == 1 .and. st%last_mechanism >= 0, "the statistics count what was done")
  ! a header of scalars and a string after the field
  step = 42
  time = 1.25d0
  label = "checkpoint"
  call check(accio_pwrite(f, step, accio_bytes(step), int(nbytes, c_int64_t)) == 4, "pwrite a scalar")
  call check(accio_pwrite(f, time, 8_c_size_t, int(nbytes, c_int64_t) + 8) == 8, "pwrite a real scalar")
  call check(accio_pwrite(f, label, accio_bytes(label), int(nbytes, c_int64_t) + 16) == 12, "pwrite a string")
  ! (each read in a statement of its own: Fortran may evaluate an .and.'s operands in any order)
  call check(accio_pread(f, step_back, 4_c_size_t, int(nbytes, c_int64_t)) == 4, "pread a scalar")
  call check(step_back == 42, "the scalar read back")
  call check(accio_pread(f, time_back, 8_c_size_t, int(nbytes, c_int64_t) + 8) == 8, "pread a real scalar")
  call check(same([time_back], [time]), "the real scalar read back")
  call check(accio_pread(f, label_back, 12_c_size_t, int(nbytes, c_int64_t) + 16) == 12, "pread a string")
  call check(label_back == "checkpoint", "the string read back")
  ! a strided section is refused: C would get a copy (for an asynchronous request, one freed early)
  got = accio_pread(f, grid(2, :), 8000_c_size_t, 0_c_int64_t)
  text = accio_last_error()
  plan = accio_last_error_op()
  call check(got == -22 .and. index(text, "not contiguous") > 0 .and. plan == "pread", &
             "a strided section is refused: " // text)
  rc = accio_pread_async(f, grid(2, :), 8000_c_size_t, 0_c_int64_t, fut)
  call check(rc == -22 .and. .not. c_associated(fut), "a strided section is refused for an asynchronous read")
  ! a contiguous section, and an assumed-shape dummy that is contiguous at run time
  grid = 0
  call check(accio_pread(f, grid(:, 3:4), 1024_c_size_t, 0_c_int64_t) == 1024, "pread into a contiguous section")
  call check(same(grid(:, 3), field(1:64)) .and. same(grid(:, 4), field(65:128)), "the section read back")
  call read_async(grid)
  call check(same(grid(:, 1), field(1:64)), "an asynchronous read from an assumed-shape dummy")
  rc = accio_close(f)
  call check(rc == 0 .and. .not. c_associated(f), "close sets the handle to c_null_ptr")
  call check(accio_close(f) == 0, "a second close is 0")

  ! append, an asynchronous write and read of bytes, a batch of two reads
  do i = 1, size(bytes)
    bytes(i) = int(mod(i * 7, 251) - 125, int8)
  end do
  rc = accio_open(f, path, "a+")
  call check(rc == 0, "open a+: " // accio_last_error())
  call check(accio_append(f, field, 8_c_size_t) == accio_size(f) - 8, "append at the end")
  call check(accio_pwrite_async(f, bytes, accio_bytes(bytes), 0_c_int64_t, fut) == 0, "pwrite_async")
  got = accio_future_wait(fut)
  call check(got == size(bytes, kind=c_int64_t), "pwrite_async's result")
  call accio_future_free(fut)
  call check(.not. c_associated(fut), "future_free sets the future to c_null_ptr")
  call check(accio_pread_async(f, bytes_back, accio_bytes(bytes), 0_c_int64_t, fut) == 0, "pread_async")
  call check(accio_future_ready(fut, 10000000000_c_int64_t) == 1, "future_ready")
  call check(accio_future_wait(fut) == size(bytes, kind=c_int64_t), "pread_async's result")
  call accio_future_free(fut)
  call check(all(bytes_back == bytes), "the bytes read back")
  bytes_back = 0
  reqs(1) = accio_request(c_loc(bytes_back(1)), 1000_c_size_t, 0_c_int64_t)
  reqs(2) = accio_request(c_loc(bytes_back(2001)), 1000_c_size_t, 2000_c_int64_t)
  call check(accio_submit(f, ACCIO_OP_READ, reqs, futures) == 0, "submit: " // accio_last_error())
  call check(accio_future_wait(futures(1)) == 1000, "submit's first result")
  call check(accio_future_wait(futures(2)) == 1000, "submit's second result")
  call accio_future_free(futures(1))
  call accio_future_free(futures(2))
  call check(all(bytes_back(1:1000) == bytes(1:1000)) .and. all(bytes_back(2001:3000) == bytes(2001:3000)) .and. &
             all(bytes_back(1001:2000) == 0), "the batch read what each request asked")
  ! page-locked memory, read through its address
  call check(accio_host_alloc(1048576_c_size_t, mem, how) == 0 .and. c_associated(mem), "host_alloc")
  call check(how == ACCIO_HOST_PAGEABLE .or. how == ACCIO_HOST_MLOCK .or. how == ACCIO_HOST_CUDA, "host_alloc's how")
  call check(accio_pread_ptr(f, mem, 1048576_c_size_t, 0_c_int64_t) == 1048576, "pread_ptr")
  call c_f_pointer(mem, pinned, [1048576])
  call check(all(pinned == bytes(1:1048576)), "the bytes read into page-locked memory")
  rc = accio_close(f)
  call check(rc == 0, "close a+")
  ! and written from there into a new file through its address
  rc = accio_open(f, trim(dir) // "/fortran_ptr.bin", "w+")
  call check(rc == 0, "open w+ for pwrite_ptr")
  got = accio_pwrite_ptr(f, mem, 1048576_c_size_t, 4096_c_int64_t)
  call check(got == 1048576, "pwrite_ptr")
  bytes_back = 0
  got = accio_pread(f, bytes_back, 1048576_c_size_t, 4096_c_int64_t)
  call check(got == 1048576 .and. all(bytes_back(1:1048576) == bytes(1:1048576)), "pwrite_ptr wrote the bytes")
  ! an error with an offset: a null address, refused with -EFAULT, the offset kept
  got = accio_pread_ptr(f, c_null_ptr, 16_c_size_t, 8192_c_int64_t)
  call check(got == -14, "pread_ptr of a null address is -EFAULT")
  call check(accio_last_error_offset() == 8192, "last_error_offset")
  rc = accio_close(f)
  call check(rc == 0, "close w+")
  call check(accio_host_free(mem) == 0 .and. .not. c_associated(mem), "host_free")
  call accio_settings_free(s)
  call check(.not. c_associated(s), "settings_free sets the handle to c_null_ptr")

  ! errors: a negative errno, and the message names the operation and the path
  rc = accio_open(f, trim(dir) // "/no/such/file", "r")
  call check(rc == -2, "open of a missing file is -ENOENT")
  text = accio_last_error_path()
  call check(accio_last_errno() == 2 .and. text == trim(dir) // "/no/such/file", "last_errno, path: " // text)
  call check(index(accio_last_error(), trim(dir) // "/no/such/file") > 0, "the error names the path: " // &
             accio_last_error())
  s = accio_settings_new()
  rc = accio_settings_set(s, "threads", "lots")
  call check(rc == -22, "a bad setting is -EINVAL")
  call check(index(accio_last_error(), "lots") > 0, "the error names the value: " // accio_last_error())
  call check(accio_settings_set(s, "no_such_setting", "1") == -22, "an unknown setting is -EINVAL")
  call accio_settings_free(s)

  ! sizes, copies of settings, the process's counters, residency, the mechanisms' names, warnings
  ! (one impure call a statement: Fortran may skip an .and.'s second operand)
  call check(accio_parse_size("16MiB") == 16777216, "parse_size 16MiB")
  call check(accio_parse_size("4k ") == 4096, "parse_size 4k, a trailing blank")
  got = accio_parse_size("lots")
  text = accio_last_error()
  call check(got == -22 .and. index(text, "lots") > 0, "parse_size of a bad size: " // text)
  s = accio_settings_new()
  call check(accio_settings_set(s, "threads", "5") == 0, "settings_set before a copy")
  mem = accio_settings_copy(s)
  call check(c_associated(mem), "settings_copy")
  call check(accio_settings_get(mem, "threads") == "5", "settings_copy keeps the values")
  call check(accio_settings_set(mem, "threads", "6") == 0, "settings_set on the copy")
  call check(accio_settings_get(s, "threads") == "5", "settings_copy is a copy")
  call accio_settings_free(mem)
  call accio_global_stats_reset()
  call check(accio_open(f, path, "r", s) == 0, "open r")
  call check(accio_pread(f, back, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "pread for the counters")
  rc = accio_global_stats(st)
  call check(rc == 0 .and. st%reads >= 1 .and. st%bytes_read >= int(nbytes, c_int64_t), "global_stats counts the read")
  text = accio_mechanism_name(st%last_mechanism)
  call check(text == "posix" .or. text == "parallel" .or. text == "direct" .or. text == "uring", &
             "mechanism_name of the last mechanism: " // text)
  call check(accio_mechanism_device(st%last_mechanism) == 0, "mechanism_device of a host mechanism")
  call check(accio_mechanism_name(9999) == "", "mechanism_name of an unknown id")
  call check(accio_mechanism_device(9999) == -22, "mechanism_device of an unknown id")
  got = accio_size(f)
  rc = accio_residency(f, 0_c_int64_t, got + 4096, cached, dirty, total)  ! the file's end cuts the range
  call check(rc == 0 .and. total == got .and. cached >= 0 .and. cached <= total .and. dirty >= 0, "residency")
  call check(accio_close(f) == 0, "close r")
  call accio_settings_free(s)
  call accio_global_stats_reset()
  rc = accio_global_stats(st)
  call check(rc == 0 .and. st%reads == 0, "global_stats_reset")
  ! a warning: a device mechanism asked to read into host memory (it runs a host one, and says so
  ! once); ACCIO_QUIET hides it from stderr, not from accio_warnings()
  s = accio_settings_new()
  call check(accio_settings_set(s, "mechanism", "staged") == 0, "settings_set mechanism staged")
  call check(accio_open(f, path, "r", s) == 0, "open with staged")
  call check(accio_pread(f, back, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "staged reads host memory")
  call check(accio_close(f) == 0, "close staged")
  call accio_settings_free(s)
  text = accio_warnings()
  call check(index(text, "mechanism staged cannot serve host memory") > 0, "warnings: " // text)
  if (len(text) > 0) call check(text(len(text):len(text)) == new_line("a"), "warnings: one per line")

  if (failures > 0) error stop "fortran_api: checks failed"
  print '(a)', "fortran_api: ok"

contains

  ! A checkpoint routine's usual shape: an assumed-shape, asynchronous dummy (contiguous here).
  subroutine read_async(u)
    real(8), intent(inout), asynchronous :: u(:, :)
    type(c_ptr) :: fut
    integer(c_int64_t) :: n
    u = 0
    call check(accio_pread_async(f, u, accio_bytes(u), 0_c_int64_t, fut) == 0, "pread_async from a dummy")
    n = accio_future_wait(fut)
    call check(n == accio_bytes(u) .or. n == int(nbytes, c_int64_t), "pread_async from a dummy: result")
    call accio_future_free(fut)
  end subroutine

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
