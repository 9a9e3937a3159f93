! The GPU part of the Fortran module (include/accio/accio.f90) through the shared libaccio, as a
! Fortran program checkpointing a field held in GPU memory runs it:
!
!   fortran_gpu DIR gpu    a GPU (the fake driver under ctest's fake-gpu label, or a real one under
!                          the gpu label, where it exits 77, skipped, when the machine has none):
!                          the driver and the GPU's facts; a real(8) field written from the host,
!                          read into GPU memory with the default plan (auto: a device mechanism),
!                          copied back bit for bit; written from GPU memory into a second file and
!                          read back on the host; each of naive, staged and gds the same way; the
!                          pointer's kind; stream synchronisation (0 refused); cuFile's state for
!                          the file; page-locked memory registered with the driver; device memory
!                          freed (the handle set to c_null_ptr)
!   fortran_gpu DIR none   no driver (ACCIO_LIBCUDA names a library that is not there): every GPU
!                          function says so with a negative errno or 0, the message naming what
!                          is missing, and host I/O goes on
program fortran_gpu
  use accio
  implicit none
  integer, parameter :: n = 1048576 + 515  ! several staging chunks and a tail
  character(len=4096) :: dir
  character(len=8) :: mode
  character(len=:), allocatable :: why, path, out
  real(8), allocatable, target :: field(:), back(:)
  type(c_ptr) :: f, s, dev, pinned
  type(accio_gpu_info) :: info
  type(accio_stats) :: st
  integer(c_size_t) :: nbytes
  integer(c_int) :: rc, device, how, m
  integer :: i, failures
  character(len=6), parameter :: mechanisms(4) = [character(len=6) :: "auto", "naive", "staged", "gds"]

  failures = 0
  if (command_argument_count() /= 2) error stop "usage: fortran_gpu DIR gpu|none"
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

  if (trim(mode) == "none") then
    call check(accio_cuda_available(why) == 0 .and. len(why) > 0, "no driver: not available, and why")
    call check(accio_gpu_count() == 0, "no driver: no GPU")
    call check(accio_gpu_info_get(0, info) < 0, "no driver: no GPU 0")
    dev = c_loc(field)  ! an accio_device_alloc that fails leaves c_null_ptr
    rc = accio_device_alloc(0, nbytes, .false., dev)
    why = accio_last_error()
    call check(rc < 0 .and. .not. c_associated(dev) .and. len(why) > 0, "no driver: accio_device_alloc fails with " // &
               "a message")
    print "(a)", "fortran_gpu: accio_device_alloc without a driver: " // why
    call check(accio_mem_kind(c_loc(field), device) == ACCIO_MEM_HOST .and. device == -1, "no driver: host memory")
    call check(accio_cuda_stream_sync(0, ACCIO_STREAM_LEGACY) < 0, "no driver: no stream to wait for")
    call check(accio_gds_info(why) == 0 .and. len(why) > 0, "no driver: no cuFile, and why")
    call check(accio_open(f, path, "r") == 0, "no driver: open")  ! host I/O goes on
    back = 0
    call check(accio_pread(f, back, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "no driver: host read")
    call check(same(back, field), "no driver: host read, the same bytes")
    call check(accio_close(f) == 0, "no driver: close")
  else if (trim(mode) == "gpu") then
    if (accio_cuda_available(why) /= 1) then
      print "(a)", "fortran_gpu: skipped, no GPU here: " // why
      stop 77
    end if
    call check(accio_gpu_count() >= 1, "a GPU")
    call check(accio_gpu_info_get(0, info) == 0, "GPU 0's facts")
    call check(len(accio_string(info%name)) > 0 .and. info%memory > 0 .and. info%cc_major > 0, "GPU 0 has a name, " // &
               "memory and a compute capability")
    print "(a, i0, a)", "fortran_gpu: " // accio_string(info%name) // ", ", info%memory / 1048576, " MiB"
    call check(accio_gpu_info_get(accio_gpu_count(), info) < 0, "no GPU past the last one")
    call check(accio_device_alloc(0, nbytes, .false., dev) == 0 .and. c_associated(dev), "accio_device_alloc")
    call check(accio_mem_kind(dev, device) == ACCIO_MEM_DEVICE .and. device == 0, "the pointer is GPU 0's memory")
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
      call check(accio_pread_ptr(f, dev, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), &
                 trim(mechanisms(m)) // ": read into GPU memory")
      call check(accio_file_stats(f, st) == 0 .and. st%bytes_read == int(nbytes, c_int64_t), &
                 trim(mechanisms(m)) // ": counted")
      call check(accio_mechanism_device(st%last_mechanism) == 1, trim(mechanisms(m)) // ": a device mechanism ran")
      print "(a)", "fortran_gpu: " // trim(mechanisms(m)) // " read ran " // accio_mechanism_name(st%last_mechanism)
      call check(accio_close(f) == 0, "close")
      call check(accio_device_copy(c_loc(back), dev, nbytes) == 0, "copy back to the host")
      call check(same(back, field), trim(mechanisms(m)) // ": the GPU holds the file's bytes")
      ! GPU memory -> a new file, read on the host
      call check(accio_open(f, out, "w", s) == 0, trim(mechanisms(m)) // ": open for writing")
      call check(accio_pwrite_ptr(f, dev, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), &
                 trim(mechanisms(m)) // ": write from GPU memory")
      call check(accio_close(f) == 0, "close")
      call accio_settings_free(s)
      call check(accio_open(f, out, "r") == 0, "open the written file")
      back = 0
      call check(accio_pread(f, back, nbytes, 0_c_int64_t) == int(nbytes, c_int64_t), "host read of it")
      call check(accio_close(f) == 0, "close")
      call check(same(back, field), trim(mechanisms(m)) // ": the file holds the GPU's bytes")
    end do
    call check(accio_gds_info(why) >= 0 .and. len(why) > 0, "cuFile's state, and why")
    call check(accio_device_free(dev) == 0 .and. .not. c_associated(dev), "accio_device_free, handle cleared")
    call check(accio_device_free(dev) == 0, "freeing c_null_ptr is 0")
    ! page-locked memory, registered with the driver that is here
    call check(accio_host_alloc(nbytes, pinned, how) == 0 .and. how == ACCIO_HOST_CUDA, "pinned memory")
    call check(accio_mem_kind(pinned, device) == ACCIO_MEM_PINNED, "the driver calls it pinned")
    call check(accio_host_free(pinned) == 0, "accio_host_free")
  else
    error stop "fortran_gpu: the mode is gpu or none"
  end if

  if (failures > 0) then
    print "(i0, a)", failures, " check(s) failed"
    error stop 1
  end if
  print "(a)", "fortran_gpu: ok (" // trim(mode) // ")"

contains

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
