! The C API from Fortran through the accio module (include/accio/accio.f90), linked against the
! shared libaccio as a Fortran program would be: a checkpoint of a real(8) field written and read
! back bit for bit (settings from Fortran strings with trailing blanks), a header of scalars and a
! character string, a slice at an offset, a read across the end, append, size, fsync, statistics,
! explain; asynchronous requests from a contiguous array and from an assumed-shape dummy, a strided
! section refused (-EINVAL, with a message) where C would have been given a temporary copy, a batch
! (accio_submit), page-locked memory read through accio_pread_ptr; handles set to c_null_ptr when
! closed or freed; and the error paths (a missing file, a bad setting: negative errno and a message
! naming them). The rest of the C API: a handle on an open descriptor, a file's settings, the plans
! that ran and the per-mechanism counters, the decision for a request from a given buffer, the
! settings table and a row registered from Fortran, plan and profile descriptions, the profile key,
! feature probes, a completion callback and a log callback (bind(C) procedures below), and accio_log.
!
!   fortran_api DIR

! The callbacks: bind(C) procedures of a module (an internal procedure would be passed as a
! trampoline on the host's stack: an executable stack, gone when the host returns).
module fortran_api_callbacks
  use, intrinsic :: iso_c_binding, only: c_ptr, c_int, c_int64_t, c_f_pointer, c_associated
  use accio, only: accio_string
  implicit none
  integer(c_int64_t) :: completed_result = -1
  integer :: completions = 0, log_calls = 0
  integer(c_int) :: log_level = 0
  logical :: future_given = .false., user_given = .true.
  character(len=:), allocatable :: log_key, log_message
contains
  ! arg is the address of a default integer the test gave: set to 7 so that the test sees arg passed
  subroutine on_done(fut, result, arg) bind(C)
    type(c_ptr), value :: fut, arg
    integer(c_int64_t), value :: result
    integer, pointer :: seen
    call c_f_pointer(arg, seen)
    seen = 7
    completed_result = result
    completions = completions + 1
    future_given = c_associated(fut)
  end subroutine
  subroutine on_log(level, key, message, user) bind(C)
    integer(c_int), value :: level
    type(c_ptr), value :: key, message, user
    log_calls = log_calls + 1
    log_level = level
    log_key = accio_string(key)
    log_message = accio_string(message)
    user_given = c_associated(user)
  end subroutine
end module

program fortran_api
  use accio
  use fortran_api_callbacks
  use, intrinsic :: iso_fortran_env, only: int8, int32, int64
  implicit none
  integer, parameter :: n = 300000
  character(len=4096) :: dir
  character(len=256) :: path  ! trailing blanks: the module trims them
  real(8), allocatable :: field(:)
  real(8), allocatable, asynchronous, target :: back(:)  ! read asynchronously with a callback too
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

  call rest_of_the_api()

  if (failures > 0) error stop "fortran_api: checks failed"
  print '(a)', "fortran_api: ok"

contains

  ! The functions of the C API not used above, each with an error path.
  subroutine rest_of_the_api()
    type(c_ptr) :: h, g, set, fut2
    type(accio_plan_stat) :: plans(8)
    type(accio_profile_key) :: key
    type(accio_setting_spec) :: spec
    integer(c_int64_t) :: calls, nb, calls2, nb2, window
    integer(c_int) :: fd, id, par, r, k, row
    integer, target :: seen
    logical :: aligned, threads_knob
    character(len=:), allocatable :: t, label, doc, detail

    set = accio_settings_new()
    call check(accio_settings_set(set, "mechanism", "parallel") == 0, "settings_set mechanism (rest)")
    call check(accio_settings_set(set, "threads", "3") == 0, "settings_set threads (rest)")
    r = accio_open(h, path, "r", set)
    call check(r == 0, "open for the rest: " // accio_last_error())
    call check(accio_file_setting(h, "threads") == "3", "file_setting threads")
    t = accio_file_setting(h, "no_such_setting", r)
    call check(t == "" .and. r == -22, "file_setting of an unknown setting")
    call check(accio_min_accelerated(h, ACCIO_OP_READ) == 0, "min_accelerated of a fixed mechanism is 0")
    call check(accio_min_accelerated(c_null_ptr, ACCIO_OP_READ) == -22, "min_accelerated without a handle")
    call check(accio_file_fd(c_null_ptr) == -22, "file_fd without a handle")
    rc = accio_explain(h, nbytes, 0_c_int64_t, ACCIO_OP_READ, plan, why, back)
    call check(rc == 0 .and. index(plan, "parallel") == 1 .and. len(why) > 0, "explain from a buffer: " // plan)
    rc = accio_explain(h, 8000_c_size_t, 0_c_int64_t, ACCIO_OP_READ, plan, why, grid(2, :))
    call check(rc == -22 .and. plan == "" .and. why == "", "explain from a strided section")
    rc = accio_explain(c_null_ptr, nbytes, 0_c_int64_t, ACCIO_OP_READ, plan, why)
    call check(rc == -22 .and. plan == "" .and. why == "", "explain without a handle: nothing made up")
    t = accio_mechanism_for_at(h, 64_c_size_t * 1048576_c_size_t, 0_c_int64_t, ACCIO_OP_READ)
    call check(t == "parallel", "mechanism_for_at: " // t)
    t = accio_mechanism_for_at(h, nbytes, 0_c_int64_t, ior(ACCIO_OP_READ, ACCIO_OP_FRESH_CACHE), back)
    call check(t == "parallel", "mechanism_for_at from a buffer, residency probed afresh: " // t)
    t = accio_mechanism_for_at(h, 8000_c_size_t, 0_c_int64_t, ACCIO_OP_READ, grid(2, :))
    detail = accio_last_error()
    call check(t == "" .and. index(detail, "not contiguous") > 0, "mechanism_for_at from a strided section: " // detail)
    t = accio_mechanism_for_at(h, 4096_c_size_t, -1_c_int64_t, ACCIO_OP_READ)
    call check(t == "", "mechanism_for_at at a negative offset")

    ! a second handle on the first one's descriptor, which stays open
    fd = accio_file_fd(h)
    call check(fd >= 0, "file_fd")
    r = accio_open_fd(g, fd, set)
    call check(r == 0 .and. c_associated(g), "open_fd: " // accio_last_error())
    bytes_back = 0  ! the file begins with `bytes` since the asynchronous write above
    call check(accio_pread(g, bytes_back, accio_bytes(bytes), 0_c_int64_t) == size(bytes, kind=c_int64_t), &
               "pread through open_fd's handle")
    call check(all(bytes_back == bytes), "open_fd's handle reads the file")
    call check(accio_close(g) == 0, "close open_fd's handle")
    call check(accio_file_fd(h) == fd, "the first handle keeps its descriptor")
    r = accio_open_fd(g, -1)
    call check(r < 0 .and. .not. c_associated(g), "open_fd of a bad descriptor")
    window = accio_prefetch_window(fd, set)
    call check(window >= 0, "prefetch_window")
    window = accio_prefetch_window(-1)
    call check(window == -9, "prefetch_window of a bad descriptor is -EBADF")

    ! a read with a completion callback
    seen = 0
    call check(accio_pread_async(h, back, nbytes, 0_c_int64_t, fut2) == 0, "pread_async for a callback")
    r = accio_future_on_complete(fut2, on_done, c_loc(seen))
    call check(r == 0, "future_on_complete")
    r = accio_future_on_complete(fut2, on_done, c_loc(seen))
    call check(r == -16, "a second callback is -EBUSY")
    r = accio_future_on_complete(c_null_ptr, on_done)
    call check(r == -22, "a callback without a future is -EINVAL")
    call accio_future_free(fut2)  ! waits for the callback to return
    call check(completions == 1 .and. completed_result == int(nbytes, c_int64_t) .and. seen == 7 .and. future_given, &
               "the callback ran once, with the future, the result and the arg")

    ! the plans that ran, the counters per mechanism
    k = accio_file_plans(h, plans)
    call check(k >= 1 .and. k <= size(plans), "file_plans")
    if (k >= 1) then
      label = accio_string(plans(1)%plan)
      t = accio_string(plans(1)%why)
      call check(index(label, "parallel") == 1 .and. plans(1)%calls >= 1 .and. &
                 plans(1)%bytes >= int(nbytes, c_int64_t) .and. len(t) > 0, "the plan that ran: " // label // ": " // t)
    end if
    r = accio_file_plans(h, plans(1:0))
    call check(r == k, "file_plans into no room still counts them")
    par = -1
    do id = 0, accio_mechanism_count() - 1
      if (accio_mechanism_name(id) == "parallel") par = id
    end do
    call check(par >= 0, "parallel among the mechanisms")
    r = accio_file_mechanism_stats(h, par, calls, nb)
    call check(r == 0 .and. calls == 1 .and. nb == int(nbytes, c_int64_t), "file_mechanism_stats: the one read")
    r = accio_global_mechanism_stats(par, calls2, nb2)
    call check(r == 0 .and. calls2 >= calls .and. nb2 >= nb, "global_mechanism_stats")
    call check(accio_file_mechanism_stats(h, 9999, calls, nb) == -22, "file_mechanism_stats of an unknown id")
    call check(accio_global_mechanism_stats(9999, calls, nb) == -22, "global_mechanism_stats of an unknown id")
    call check(accio_mechanism_available(par) == 1, "parallel is available")
    r = accio_mechanism_available(9999, t)
    call check(r == -22, "mechanism_available of an unknown id")
    threads_knob = .false.
    do k = 0, 63
      t = accio_mechanism_knob(par, k)
      if (t == "") exit
      threads_knob = threads_knob .or. t == "threads"
    end do
    call check(threads_knob, "parallel reads the setting threads")
    call check(accio_mechanism_knob(9999, 0) == "", "mechanism_knob of an unknown id")
    call check(accio_close(h) == 0, "close (rest)")

    ! the settings table, and a row registered from Fortran
    row = -1
    do k = 0, accio_setting_count() - 1
      if (accio_setting_name(k) == "threads") row = k
    end do
    call check(row >= 0, "threads in the settings table")
    call check(accio_setting_env(row) == "ACCIO_THREADS", "threads' variable")
    call check(len(accio_setting_doc(row)) > 0, "threads' text")
    r = accio_setting_spec_of(row, spec)
    t = accio_string(spec%kind)
    label = accio_string(spec%name)
    call check(r == 0 .and. t == "count" .and. label == "threads" .and. spec%max >= spec%min, &
               "setting_spec_of threads: " // label // ", " // t)
    call check(accio_setting_spec_of(-1, spec) == -22, "setting_spec_of of no row")
    call check(accio_setting_name(-1) == "", "setting_name of no row")
    call check(accio_setting_env(accio_setting_count()) == "", "setting_env of no row")
    call check(accio_setting_doc(accio_setting_count()) == "", "setting_doc of no row")
    r = accio_setting_register("fortran_knob", "ACCIO_FORTRAN_KNOB", "a knob of the Fortran test", "count", "3", &
                               1_c_int64_t, 10_c_int64_t)
    call check(r == 0, "setting_register: " // accio_last_error())
    call check(accio_settings_get(c_null_ptr, "fortran_knob") == "3", "a registered row's default")
    g = accio_settings_new()
    call check(accio_settings_set(g, "fortran_knob", "11") == -22, "a registered row's bounds")
    call check(accio_settings_set(g, "fortran_knob", "10") == 0, "a registered row set")
    call check(accio_settings_get(g, "fortran_knob") == "10", "a registered row read back")
    call accio_settings_free(g)
    r = accio_setting_register("fortran_knob", "ACCIO_FORTRAN_KNOB", "a knob of the Fortran test", "count", "3", &
                               1_c_int64_t, 10_c_int64_t)
    call check(r == 0, "the same row again is 0")
    r = accio_setting_register("fortran_knob", "ACCIO_FORTRAN_KNOB", "another knob", "size", "1k")
    call check(r == -17, "another row under a name taken is -EEXIST")
    r = accio_setting_register("fortran_choice", "ACCIO_FORTRAN_CHOICE", "a choice", "choice", "b", choices="a|b")
    call check(r == 0, "setting_register of a choice: " // accio_last_error())
    g = accio_settings_new()
    call check(accio_settings_set(g, "fortran_choice", "c") == -22, "a choice outside its choices")
    call accio_settings_free(g)
    r = accio_setting_register("Bad Name", "ACCIO_BAD", "bad", "count", "1")
    call check(r == -22, "a bad name is -EINVAL")
    ! bounds left out: 0 and unbounded above, as in C
    r = accio_setting_register("fortran_size", "ACCIO_FORTRAN_SIZE", "a size without bounds", "size", "4k")
    call check(r == 0, "setting_register of a size without bounds: " // accio_last_error())
    r = accio_setting_register("fortran_count", "ACCIO_FORTRAN_COUNT", "a count with a minimum", "count", "3", &
                               min=2_c_int64_t)
    call check(r == 0, "setting_register of a count with a minimum only: " // accio_last_error())
    g = accio_settings_new()
    call check(accio_settings_set(g, "fortran_size", "16MiB") == 0, "a size without bounds takes 16MiB")
    call check(accio_settings_get(g, "fortran_size") == "16777216", "a size without bounds read back: " // &
               accio_settings_get(g, "fortran_size"))
    call check(accio_settings_set(g, "fortran_count", "1000000") == 0, "a count with a minimum only, a large value")
    call check(accio_settings_set(g, "fortran_count", "1") == -22, "a count below its minimum")
    call accio_settings_free(g)
    ! a setting value longer than the wrappers' first buffer comes back whole
    r = accio_setting_register("fortran_text", "ACCIO_FORTRAN_TEXT", "a long text", "text", "x")
    call check(r == 0, "setting_register of a text: " // accio_last_error())
    g = accio_settings_new()
    call check(accio_settings_set(g, "fortran_text", repeat("abcdefgh", 1000)) == 0, "a text of 8000 characters")
    t = accio_settings_get(g, "fortran_text")
    call check(t == repeat("abcdefgh", 1000), "a text of 8000 characters read back whole")
    call accio_settings_free(g)
    ! an error recorded by a library on top of accio
    r = accio_set_last_error(5, "my_checkpoint", trim(dir) // "/step.bin", "the step is out of range")
    detail = accio_last_error()
    k = accio_last_errno()
    call check(r == -5 .and. k == 5 .and. index(detail, "my_checkpoint") == 1 .and. &
               index(detail, "step.bin") > 0 .and. index(detail, "the step is out of range") > 0, &
               "set_last_error: " // detail)
    r = accio_set_last_error(2, "my_open")
    detail = accio_last_error()
    call check(r == -2 .and. index(detail, "my_open") == 1 .and. len(detail) > len("my_open"), &
               "set_last_error without a path or detail: " // detail)
    call check(accio_set_last_error(0, "x") == -22, "set_last_error of errno 0 is -EINVAL")

    ! plans and profiles described, the profile key, the probes
    r = accio_plan_describe('{"mechanism": "uring", "queue_depth": 16, "direct": true}', label, aligned)
    call check(r == 0 .and. index(label, "uring+direct") == 1 .and. aligned, "plan_describe: " // label)
    r = accio_plan_describe('{"mechanism": "parallel"}', label, aligned)
    call check(r == 0 .and. index(label, "parallel") == 1 .and. .not. aligned, "plan_describe parallel: " // label)
    r = accio_plan_describe('{"mechanism": "nonsense"}', label)
    detail = accio_last_error()
    call check(r == -22 .and. label == "" .and. len(detail) > 0, "plan_describe of a bad plan: " // detail)
    doc = accio_profile_describe()
    call check(index(doc, '"label"') > 0, "profile_describe of the built-in model")
    doc = accio_profile_describe(source=trim(dir))
    call check(index(doc, '"label"') > 0, "profile_describe of the model for a directory's device")
    doc = accio_profile_describe("{not json", "fortran-profile", r)
    detail = accio_last_error()
    call check(doc == "" .and. r == -22 .and. index(detail, "fortran-profile") > 0, "profile_describe of bad text: " // &
               detail)
    r = accio_profile_key_of(trim(dir), key)
    t = accio_string(key%filesystem)
    detail = accio_string(key%file)
    call check(r == 0 .and. len(t) > 0 .and. len(detail) > 0, "profile_key_of: " // t // ", " // detail)
    r = accio_profile_key_of(trim(dir) // "/no/such/dir", key)
    call check(r == -2, "profile_key_of a missing path is -ENOENT")
    r = accio_probe("mincore", detail=detail)
    call check(r == 1 .and. len(detail) > 0, "probe mincore: " // detail)
    r = accio_probe("o_direct", trim(dir), detail)
    call check((r == 0 .or. r == 1) .and. len(detail) > 0, "probe o_direct: " // detail)
    r = accio_probe("o_direct")
    call check(r == -22, "probe o_direct without a path")
    r = accio_probe("no_such_feature")
    call check(r < 0, "probe of an unknown feature")

    ! the log: a callback, then stderr again
    call accio_set_log_callback(on_log)
    r = accio_log(ACCIO_LOG_WARNING, "fortran", "a message from Fortran")
    call check(r == 0 .and. log_calls == 1 .and. log_level == ACCIO_LOG_WARNING .and. .not. user_given, &
               "the log callback got the message")
    if (log_calls == 1) call check(log_key == "fortran" .and. log_message == "a message from Fortran", &
                                   "the log callback's key and message: " // log_key // ": " // log_message)
    call accio_set_log_callback()
    r = accio_log(ACCIO_LOG_INFO, "fortran", "to stderr, hidden by ACCIO_QUIET under ctest")
    call check(r == 0 .and. log_calls == 1, "the callback unset: stderr again")
    call check(accio_log(99, "fortran", "x") == -22, "a bad level is -EINVAL")
    call accio_settings_free(set)
  end subroutine

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
