# CMake toolchain file: cross-compile for 64-bit Windows with Debian's MinGW-w64 (posix threads).
#
#   cmake -DCMAKE_TOOLCHAIN_FILE=cmake/mingw-w64-x86_64.cmake -DMUSTER_MINGW_PREFIX=<deps prefix> ...
#
# scripts/build-windows.sh builds the dependencies into <deps prefix> and passes it here. The posix
# flavour of the compilers is required: its libstdc++ has std::thread/std::mutex (the win32 flavour
# does not), which Abseil, gRPC, Gloo and muster all use.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)

set(MUSTER_MINGW_TRIPLE x86_64-w64-mingw32)
set(CMAKE_C_COMPILER ${MUSTER_MINGW_TRIPLE}-gcc-posix)
set(CMAKE_CXX_COMPILER ${MUSTER_MINGW_TRIPLE}-g++-posix)
set(CMAKE_RC_COMPILER ${MUSTER_MINGW_TRIPLE}-windres)
set(CMAKE_AR ${MUSTER_MINGW_TRIPLE}-gcc-ar-posix CACHE FILEPATH "")
set(CMAKE_RANLIB ${MUSTER_MINGW_TRIPLE}-gcc-ranlib-posix CACHE FILEPATH "")

# The prefix holding the cross-built dependencies; try_compile projects re-read this file, so the
# value must be forwarded to them (or come from the environment).
if(NOT MUSTER_MINGW_PREFIX AND DEFINED ENV{MUSTER_MINGW_PREFIX})
  set(MUSTER_MINGW_PREFIX "$ENV{MUSTER_MINGW_PREFIX}")
endif()
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES MUSTER_MINGW_PREFIX)

# Headers, libraries and CMake packages come from the MinGW sysroot and the dependency prefix only
# (never the host's /usr/include); programs (protoc, grpc_cpp_plugin, perl) come from the host.
set(CMAKE_FIND_ROOT_PATH /usr/${MUSTER_MINGW_TRIPLE})
if(MUSTER_MINGW_PREFIX)
  list(PREPEND CMAKE_FIND_ROOT_PATH ${MUSTER_MINGW_PREFIX})
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# Static libraries only: the sysroot also has import libraries (libz.dll.a), which would make the
# .exe files need DLLs that are not beside them.
set(CMAKE_FIND_LIBRARY_SUFFIXES .a)

# Windows Vista is the minimum gRPC builds for with MinGW; ask for Windows 10 APIs.
set(CMAKE_C_FLAGS_INIT "-D_WIN32_WINNT=0x0A00")
set(CMAKE_CXX_FLAGS_INIT "-D_WIN32_WINNT=0x0A00")
# Self-contained .exe files: libgcc, libstdc++ and winpthread linked in, system DLLs only.
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")

# ctest (and add_test commands) run the .exe files under wine.
find_program(MUSTER_WINE64 NAMES wine64 PATHS /usr/lib/wine NO_CMAKE_FIND_ROOT_PATH)
if(MUSTER_WINE64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${MUSTER_WINE64})
endif()
