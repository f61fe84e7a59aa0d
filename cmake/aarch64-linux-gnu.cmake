# Toolchain file for cross-building spool for 64-bit ARM Linux on an x86-64
# Debian/Ubuntu host (packages g++-aarch64-linux-gnu and qemu-user). Binaries
# run under qemu-user with the target's libraries from /usr/aarch64-linux-gnu;
# scripts/test-arm.sh uses it for the kernels-only build (SPOOL_KERNELS_ONLY).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# pkg-config: the target's .pc files (Debian multiarch :arm64 -dev packages,
# scripts/build-arm.sh) and the arch-independent ones, never the host's.
# Their -L/-I paths (/usr/lib/aarch64-linux-gnu, /usr/include) are real host
# paths, so no sysroot prefix is added. FindPkgConfig's find_library re-roots
# them under CMAKE_FIND_ROOT_PATH and misses, then links plain -lNAME, which
# the Debian cross linker resolves in /usr/lib/aarch64-linux-gnu.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")
unset(ENV{PKG_CONFIG_SYSROOT_DIR})

# "-cpu max" turns on every optional feature qemu emulates (dotprod, fp16),
# so the NEON kernel table is selected at run time.
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64;-cpu;max;-L;/usr/aarch64-linux-gnu)
