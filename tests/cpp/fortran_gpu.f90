! The GPU part of the Fortran module (include/accio/accio.f90) through the shared libaccio, as a
! Fortran program checkpointing a field held in GPU memory runs it:
!
!   fortran_gpu DIR gpu    a GPU (the real one under ctest's gpu label, where it exits 77, skipped,
!                          when the machine has none): the driver and the GPU's facts; a real(8)
!                          field written from the host, read into GPU memory with the default plan
!                          (auto) and with naive, staged and gds, each time a device mechanism
!                          running (named), copied back bit for bit; written from GPU memory into a
!                          second file and read back on the host; managed memory; the pointers'
!                          kinds; stream synchronisation (0 refused); cuFile's state for the file
!                          and the machine; page-locked memory registered with the driver; device
!                          memory freed (the handle set to c_null_ptr)
!   fortran_gpu DIR fake   the same against tests/fake_cuda (fake-gpu label), and the facts the fake
!                          driver gives checked field by field: the bind(C) type accio_gpu_info has
!                          the C struct's layout
!   fortran_gpu DIR none   no driver (ACCIO_LIBCUDA names a library that is not there): each GPU
!                          function fails with a negative errno and a message, or says 0 / host,
!                          and host I/O goes on
!
! One function call that sets an argument per statement: Fortran may evaluate a statement's
! operands in any order, or skip an .and.'s second one.
! The callback of accio_cuda_with_device: counts its calls and says whether it got its argument.
module fortran_gpu_callbacks
  use, intrinsic :: iso_c_binding, only: c_ptr, c_associated
  implicit none
  integer :: with_device_calls = 0
  logical :: with_device_arg = .false.
contains
  subroutine count_call(arg) bind(C)
    type(c_ptr), value :: arg
    with_device_calls = with_device_calls + 1
    with_device_arg = c_associated(arg)
  end subroutine
end module

program fortran_gpu
  use accio
  use fortran_gpu_callbacks
  use, intrinsic :: iso_c_binding, only: c_sizeof, c_double
  implicit none
  integer, parameter :: n = 1048576 + 515  ! several staging chunks and a tail
  character(len=4096) :: dir
  character(len=8) :: mode
  character(len=:), allocatable :: why, path, out, text
  real(8), allocatable, target :: field(:), back(:)
  type(c_ptr) :: f, s, dev, managed, pinned, p
  type(accio_gpu_info) :: info
  type(accio_stats) :: st
  integer(c_size_t) :: nbytes
  integer(c_int64_t) :: got
  integer(c_int) :: rc, device, how, m, kind
  real(c_double) :: seconds
  integer :: i, failures
  character(len=6), parameter :: mechanisms(4) = [character(len=6) :: "auto", "naive", "staged", "gds"]

  failures = 0
  if (command_argument_count() /= 2) error stop "usage: fortran_gpu DIR gpu|fake|none"
  call get_command_argument(1, dir)
  call get_command_argument(2, mode)
  path = trim(dir) // "/fortran_gpu.bin"
  out = trim(dir) // "/fortran_gpu_out.bin"
  allocate (field(n), back(n))
  do i = 1, n
    field(i) = real(i, 8) * 0.5d0 - 3.25d0
  end do
  nbytes = accio_bytes(field)
  call check(accio_open(f, path, "w") == 0, "open for the checkpoint")
  call check(accio_pwrite(f, field, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "host write")
  call check(accio_close(f) == 0, "close")

  select case (trim(mode))
  case ("none")
    call no_driver()
  case ("gpu", "fake")
    call with_gpu(trim(mode) == "fake")
  case default
    error stop "fortran_gpu: the mode is gpu, fake or none"
  end select

  if (failures > 0) then
    print "(i0, a)", failures, " check(s) failed"
    error stop 1
  end if
  print "(a)", "fortran_gpu: ok (" // trim(mode) // ")"

contains

  subroutine no_driver()
    rc = accio_cuda_available(why)
    call check(rc == 0 .and. len(why) > 0, "no driver: not available, and why")
    call check(accio_gpu_count() == 0, "no driver: no GPU")
    call check(accio_gpu_info_get(0, info) < 0, "no driver: no GPU 0")
    dev = c_loc(field)  ! an accio_device_alloc that fails leaves c_null_ptr
    rc = accio_device_alloc(0, nbytes, .false., dev)
    why = accio_last_error()
    call check(rc < 0 .and. .not. c_associated(dev) .and. len(why) > 0, "no driver: accio_device_alloc fails with " // &
               "a message")
    print "(a)", "fortran_gpu: accio_device_alloc without a driver: " // why
    rc = accio_device_free(dev)
    call check(rc == 0, "no driver: freeing c_null_ptr is 0")
    kind = accio_mem_kind(c_loc(field), device)
    call check(kind == ACCIO_MEM_HOST .and. device == -1, "no driver: host memory")
    rc = accio_cuda_stream_sync(0, ACCIO_STREAM_LEGACY)
    why = accio_last_error()
    call check(rc < 0 .and. len(why) > 0, "no driver: no stream to wait for, and a message")
    rc = accio_gds_info(why)
    call check(rc == 0 .and. len(why) > 0, "no driver: no cuFile, and why")
    rc = accio_cuda_copy_seconds(0, .true., 1048576_c_size_t, 65536_c_size_t, 1, seconds)
    why = accio_last_error()
    call check(rc == -19 .and. len(why) > 0, "no driver: no copy ceiling (-ENODEV), and a message")
    rc = accio_cuda_with_device(0, count_call)
    call check(rc == -19 .and. with_device_calls == 0, "no driver: cuda_with_device is -ENODEV, fn not called")
    call check(accio_open(f, path, "r") == 0, "no driver: open")  ! host I/O goes on
    rc = accio_gds_mode(f, why)
    call check(rc == 0 .and. len(why) > 0, "no driver: the file in compatibility mode at best, and why: " // why)
    back = 0
    call check(accio_pread(f, back, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "no driver: host read")
    call check(same(back, field), "no driver: host read, the same bytes")
    call check(accio_close(f) == 0, "no driver: close")
  end subroutine

  subroutine with_gpu(fake)
    logical, intent(in) :: fake
    rc = accio_cuda_available(why)
    if (rc /= 1) then
      if (fake) then
        print "(a)", "FAILED: the fake driver did not load: " // why
        error stop 1
      end if
      print "(a)", "fortran_gpu: skipped, no GPU here: " // why
      stop 77
    end if
    call check(accio_gpu_count() >= 1, "a GPU")
    rc = accio_gpu_info_get(0, info)
    call check(rc == 0, "GPU 0's facts")
    text = accio_string(info%name)
    call check(len(text) > 0 .and. info%memory > 0 .and. info%cc_major > 0, "GPU 0 has a name, memory and a " // &
               "compute capability")
    print "(a, i0, a)", "fortran_gpu: " // text // ", ", info%memory / 1048576, " MiB"
    if (fake) then  ! what tests/fake_cuda says, field by field: the type's layout is the C struct's
      call check(c_sizeof(info) == 648_c_size_t, "accio_gpu_info is as large as the C struct")
      call check(info%ordinal == 0 .and. text == "accio fake GPU 0", "the fake GPU's ordinal and name")
      call check(accio_string(info%pci_bus_id) == "0000:17:00.0", "the fake GPU's PCI bus id: " // &
                 accio_string(info%pci_bus_id))
      call check(info%memory == 1073741824_c_int64_t .and. info%cc_major == 9 .and. info%cc_minor == 0, &
                 "the fake GPU's memory and compute capability")
      call check(info%multiprocessors == 4 .and. info%copy_engines == 2, "the fake GPU's multiprocessors and copy engines")
    end if
    rc = accio_gpu_info_get(accio_gpu_count(), info)
    call check(rc < 0, "no GPU past the last one")
    rc = accio_device_alloc(0, nbytes, .false., dev)
    call check(rc == 0 .and. c_associated(dev), "accio_device_alloc")
    kind = accio_mem_kind(dev, device)
    call check(kind == ACCIO_MEM_DEVICE .and. device == 0, "the pointer is GPU 0's memory")
    rc = accio_device_alloc(0, nbytes, .true., managed)
    call check(rc == 0 .and. c_associated(managed), "accio_device_alloc of managed memory")
    kind = accio_mem_kind(managed, device)
    call check(kind == ACCIO_MEM_MANAGED .and. device == 0, "the pointer is managed memory")
    call check(accio_cuda_stream_sync(0, ACCIO_STREAM_LEGACY) == 0, "wait for the legacy default stream")
    call check(accio_cuda_stream_sync(0, ACCIO_STREAM_PER_THREAD) == 0, "wait for the per-thread stream")
    call check(accio_cuda_stream_sync(0, 0_c_intptr_t) == -22, "stream 0 refused (-EINVAL)")
    do m = 1, size(mechanisms)
      s = accio_settings_new()
      call check(accio_settings_set(s, "mechanism", mechanisms(m)) == 0, "mechanism " // trim(mechanisms(m)))
      ! file -> GPU memory, copied back to the host
      call check(accio_open(f, path, "r", s) == 0, trim(mechanisms(m)) // ": open")
      if (trim(mechanisms(m)) == "gds") then
        rc = accio_gds_mode(f, why)
        call check(rc >= 0 .and. rc <= 2 .and. len(why) > 0, "gds: cuFile's mode for the file, and why")
      end if
      back = 0
      call check(accio_device_copy(dev, c_loc(back), nbytes) == 0, "clear the GPU buffer")
      got = accio_pread_ptr(f, dev, nbytes, 0_c_int64_t)
      call check(got == int(nbytes, c_int64_t), trim(mechanisms(m)) // ": read into GPU memory")
      rc = accio_file_stats(f, st)
      call check(rc == 0 .and. st%bytes_read == int(nbytes, c_int64_t), trim(mechanisms(m)) // ": counted")
      call check(accio_mechanism_device(st%last_mechanism) == 1, trim(mechanisms(m)) // ": a device mechanism ran")
      print "(a)", "fortran_gpu: " // trim(mechanisms(m)) // " read ran " // accio_mechanism_name(st%last_mechanism)
      call check(accio_close(f) == 0, "close")
      call check(accio_device_copy(c_loc(back), dev, nbytes) == 0, "copy back to the host")
      call check(same(back, field), trim(mechanisms(m)) // ": the GPU holds the file's bytes")
      ! GPU memory -> a new file, read on the host
      call check(accio_open(f, out, "w", s) == 0, trim(mechanisms(m)) // ": open for writing")
      got = accio_pwrite_ptr(f, dev, nbytes, 0_c_int64_t)
      call check(got == int(nbytes, c_int64_t), trim(mechanisms(m)) // ": write from GPU memory")
      call check(accio_close(f) == 0, "close")
      call accio_settings_free(s)
      call check(accio_open(f, out, "r") == 0, "open the written file")
      back = 0
      call check(accio_pread(f, back, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "host read of it")
      call check(accio_close(f) == 0, "close")
      call check(same(back, field), trim(mechanisms(m)) // ": the file holds the GPU's bytes")
    end do
    ! the file into managed memory, read there by the host
    call check(accio_open(f, path, "r") == 0, "open for managed memory")
    got = accio_pread_ptr(f, managed, nbytes, 0_c_int64_t)
    call check(got == int(nbytes, c_int64_t), "read into managed memory")
    call check(accio_close(f) == 0, "close")
    call check(accio_device_copy(c_loc(back), managed, nbytes) == 0, "copy managed memory to the host")
    call check(same(back, field), "managed memory holds the file's bytes")
    rc = accio_gds_info(why)
    call check(rc >= 0 .and. len(why) > 0, "cuFile's state, and why")
    ! the pinned-copy ceiling both ways
    rc = accio_cuda_copy_seconds(0, .true., 8388608_c_size_t, 1048576_c_size_t, 2, seconds)
    call check(rc == 0 .and. seconds > 0, "the host-to-device copy ceiling")
    rc = accio_cuda_copy_seconds(0, .false., 8388608_c_size_t, 1048576_c_size_t, 1, seconds)
    call check(rc == 0 .and. seconds > 0, "the device-to-host copy ceiling")
    rc = accio_cuda_copy_seconds(0, .true., 8388608_c_size_t, 1048576_c_size_t, 0, seconds)
    call check(rc == -22, "no threads: -EINVAL")
    ! a callback run with GPU 0 current, with its argument; none on a GPU that is not there
    rc = accio_cuda_with_device(0, count_call, c_loc(field))
    call check(rc == 0 .and. with_device_calls == 1 .and. with_device_arg, "cuda_with_device runs the callback")
    rc = accio_cuda_with_device(accio_gpu_count(), count_call)
    call check(rc == -19 .and. with_device_calls == 1, "cuda_with_device on no such GPU: -ENODEV, not run")
    p = dev
    rc = accio_device_free(dev)
    call check(rc == 0 .and. .not. c_associated(dev), "accio_device_free, handle cleared")
    call check(accio_device_free(dev) == 0, "freeing c_null_ptr is 0")
    rc = accio_device_free(managed)
    call check(rc == 0 .and. .not. c_associated(managed), "accio_device_free of managed memory")
    kind = accio_mem_kind(p, device)
    call check(kind /= ACCIO_MEM_DEVICE, "the freed address is no longer GPU memory")
    ! page-locked memory, registered with the driver that is here
    rc = accio_host_alloc(nbytes, pinned, how)
    call check(rc == 0 .and. how == ACCIO_HOST_CUDA, "pinned memory")
    kind = accio_mem_kind(pinned, device)
    call check(kind == ACCIO_MEM_PINNED, "the driver calls it pinned")
    call check(accio_host_free(pinned) == 0, "accio_host_free")
  end subroutine

  ! Bit for bit.
  logical function same(a, b)
    real(8), intent(in) :: a(:), b(:)
    same = size(a) == size(b)
    if (same) same = all(transfer(a, 0_c_int64_t, size(a)) == transfer(b, 0_c_int64_t, size(b)))
  end function

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (ok) return
    failures = failures + 1
    print "(a)", "FAILED: " // what // " (last error: " // accio_last_error() // ")"
  end subroutine

end program fortran_gpu
