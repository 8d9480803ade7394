# The partial Windows build (-DMUSTER_WINDOWS_PARTIAL=ON; scripts/build-windows.sh passes it).
#
# Only the targets whose code is portable today are defined here, against the dependencies
# scripts/build-windows.sh cross-built into MUSTER_MINGW_PREFIX. The rest of muster still calls
# POSIX directly (see docs/windows.md, "What is left"); as issue 13's platform layer gives each of
# them a windows/ side, the target moves back to its module's CMakeLists.txt and this file shrinks.
# ctest runs the test executables under wine64 (CMAKE_CROSSCOMPILING_EMULATOR in the toolchain file).
if(NOT CMAKE_CROSSCOMPILING OR NOT WIN32)
  message(FATAL_ERROR "MUSTER_WINDOWS_PARTIAL is for the MinGW cross build: "
    "bash scripts/build-windows.sh (toolchain cmake/mingw-w64-x86_64.cmake)")
endif()

add_compile_definitions(MUSTER_VERSION="${PROJECT_VERSION}")
set(MUSTER_WARNINGS -Wall -Wextra -Werror)
include(${CMAKE_CURRENT_LIST_DIR}/MusterHelpers.cmake)
include(${CMAKE_CURRENT_LIST_DIR}/EmbedFiles.cmake)  # muster_embed_files (the console, rendezvous/)
# Gloo's exported target names libuv as plain "uv_a" (libuv_a.a in the prefix).
link_directories(${MUSTER_MINGW_PREFIX}/lib)

find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
# protoc and grpc_cpp_plugin run on the build machine: Debian's, the same versions as the libraries.
find_program(Protobuf_PROTOC_EXECUTABLE protoc REQUIRED)
# Static zlib: FindZLIB (which protobuf's and gRPC's packages call) adds .dll.a to the suffixes the
# toolchain file allows and picks the sysroot's import library, which made every .exe (and
# muster_comm.dll) need a zlib1.dll that is not beside it.
find_library(MUSTER_ZLIB_STATIC NAMES libz.a REQUIRED)
set(ZLIB_LIBRARY_RELEASE ${MUSTER_ZLIB_STATIC} CACHE FILEPATH "zlib, static (WindowsPartial.cmake)"
  FORCE)
find_package(Protobuf REQUIRED)
# OpenSSL and gRPC are the last (and by far the longest) dependencies scripts/build-windows.sh
# builds; until they are there the targets that need neither still build and can be tested.
set(OPENSSL_USE_STATIC_LIBS ON)
find_package(OpenSSL QUIET)
find_package(gRPC CONFIG QUIET)
find_program(MUSTER_GRPC_CPP_PLUGIN grpc_cpp_plugin)
find_package(Gloo CONFIG QUIET)
message(STATUS "muster (Windows, partial): OpenSSL ${OPENSSL_FOUND}, gRPC ${gRPC_FOUND}, "
  "Gloo ${Gloo_FOUND}")

# What libuv (inside Gloo) and gRPC need from Windows.
set(MUSTER_WIN32_SYSTEM_LIBS ws2_32 iphlpapi userenv dbghelp ole32 psapi user32 advapi32 shell32
  crypt32 bcrypt)
# libuv as a target that brings its Windows libraries along. Gloo's exported target names it as a
# plain "uv_a", which CMake then knows no dependencies of: wherever the link line put libuv_a.a
# last (after gloo, after every ws2_32 a target named), WSASendTo, WSADuplicateSocketW and
# GetUserProfileDirectoryW were unresolved (muster-bench.exe). With this target every uv_a on any
# link line is followed by the libraries below. GLOBAL: Gloo's imported target is used from the
# subdirectories.
find_library(MUSTER_LIBUV_STATIC NAMES libuv_a.a)
if(MUSTER_LIBUV_STATIC AND NOT TARGET uv_a)
  add_library(uv_a STATIC IMPORTED GLOBAL)
  set_target_properties(uv_a PROPERTIES IMPORTED_LOCATION ${MUSTER_LIBUV_STATIC}
    INTERFACE_LINK_LIBRARIES "${MUSTER_WIN32_SYSTEM_LIBS}")
endif()

# --- platform: the OS layer, with its windows/ side (platform/CMakeLists.txt picks it). --------
add_subdirectory(platform)

# --- proto: the messages (and the gRPC stubs once gRPC is there) -------------------------------
if(gRPC_FOUND AND NOT TARGET gRPC::grpc_cpp_plugin)
  # The cross-built gRPC has no plugins: the host's (Debian's, the same version) generates.
  add_executable(gRPC::grpc_cpp_plugin IMPORTED)
  set_target_properties(gRPC::grpc_cpp_plugin PROPERTIES IMPORTED_LOCATION ${MUSTER_GRPC_CPP_PLUGIN})
endif()
set(MUSTER_PROTO_MESSAGES_ONLY ON)
if(gRPC_FOUND)
  set(MUSTER_PROTO_MESSAGES_ONLY OFF)
endif()
add_subdirectory(proto)

# --- common (its HTTP endpoint on the civetweb scripts/build-windows.sh cross-built), the store
# module and the rendezvous module (core, gRPC services, server, clients): their OS calls are
# platform's, so their own CMakeLists pick only the Windows stubs (rendezvous's gRPC-listening
# standalone Store). ---------------------------------------------------------------------------
if(OPENSSL_FOUND AND gRPC_FOUND)
  # civetweb: static, linked against the prefix's OpenSSL (its TLS is not loaded at run time as
  # Debian's is). A prefix made before civetweb was a dependency has none: common then builds
  # HttpServer's stand-in, which refuses --http-listen and says how to get civetweb.
  find_path(MUSTER_CIVETWEB_INCLUDE_DIR civetweb.h)
  find_library(MUSTER_CIVETWEB_LIBRARY NAMES libcivetweb.a)
  if(MUSTER_CIVETWEB_INCLUDE_DIR AND MUSTER_CIVETWEB_LIBRARY AND NOT TARGET civetweb::civetweb)
    add_library(civetweb::civetweb STATIC IMPORTED)
    set_target_properties(civetweb::civetweb PROPERTIES
      IMPORTED_LOCATION ${MUSTER_CIVETWEB_LIBRARY}
      INTERFACE_INCLUDE_DIRECTORIES ${MUSTER_CIVETWEB_INCLUDE_DIR}
      INTERFACE_LINK_LIBRARIES "OpenSSL::SSL;OpenSSL::Crypto;ws2_32;crypt32")
  endif()
  message(STATUS "muster (Windows, partial): civetweb (--http-listen) "
    "${MUSTER_CIVETWEB_LIBRARY}")
  find_package(nlohmann_json CONFIG REQUIRED)
  find_package(CLI11 CONFIG REQUIRED)
  add_subdirectory(common)
  add_subdirectory(store)
  add_subdirectory(rendezvous)
  # muster.exe: the agent, doctor (its portable checks; the Windows collector is partial) and
  # the launcher's command line (platform/windows/launch_os_windows.cc).
  add_subdirectory(agent)
  add_subdirectory(doctor)
  add_subdirectory(cli)
endif()

# --- libmuster_comm on Gloo's libuv transport (OS calls in platform/windows/; tcp:// and env:// need
# muster_store, the gRPC store). ---------------------------------------------------------------
if(Gloo_FOUND AND TARGET muster_store)
  add_subdirectory(comm)
  # muster-bench.exe (bench/CMakeLists.txt defines only it on Windows).
  add_subdirectory(bench)
endif()

# --- tests (under wine) ----------------------------------------------------------------------
if(MUSTER_BUILD_TESTS)
  enable_testing()
  find_package(GTest CONFIG REQUIRED)
  # The rendezvous module's own tests, unchanged: the core's pure logic on fake channels and a
  # FakeClock, and the gRPC layer with a real RendezvousServer on 127.0.0.1 under wine.
  if(TARGET muster_rendezvous)
    add_library(muster_testing_join STATIC tests/testing/join.cc)
    target_include_directories(muster_testing_join PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(muster_testing_join PUBLIC muster_proto)
    foreach(t kv_store rank_assignment coordinator coordinator_preflight auth coordinator_session
              coordinator_scale lease adoption status_page)
      muster_test(${t}_test SRCS tests/rendezvous/${t}_test.cc
                  DEPS muster_rendezvous_core muster_testing_join TIMEOUT 180)
    endforeach()
    # tests/testing's portable helpers (no subprocess, no POSIX sockets).
    add_library(muster_testing_rendezvous STATIC tests/testing/rendezvous.cc
      tests/testing/wait.cc tests/testing/ports.cc)
    target_include_directories(muster_testing_rendezvous PUBLIC ${PROJECT_SOURCE_DIR})
    target_link_libraries(muster_testing_rendezvous PUBLIC muster_rendezvous muster_testing_join
      GTest::gtest)
    foreach(t session session_stream grpc_store local_rendezvous)
      muster_test(${t}_test SRCS tests/rendezvous/${t}_test.cc
                  DEPS muster_testing_rendezvous TIMEOUT 180)
    endforeach()
    muster_test(rendezvous_server_test SRCS tests/rendezvous/server_test.cc
                DEPS muster_testing_rendezvous TIMEOUT 180)
    foreach(t duration ids)
      muster_test(${t}_test SRCS tests/common/${t}_test.cc DEPS muster_common TIMEOUT 60)
    endforeach()
    # The Windows Net on loopback: interfaces, the TCP table, binds, connects, resolution,
    # and the probe over it.
    muster_test(win_net_test SRCS tests/windows/win_net_test.cc DEPS muster_common ws2_32
                TIMEOUT 120)
  endif()
  # musterd.exe: its host logic on the platform fakes, its version, and a real job of Linux
  # agents against it under wine, in the console and as a service (tests/windows/*.sh runs
  # natively: add_test(COMMAND bash) gets no emulator).
  if(TARGET musterd)
    muster_test(musterd_host_test SRCS tests/cli/musterd_host_test.cc
                DEPS muster_musterd_host muster_platform_fake TIMEOUT 120)
    add_test(NAME musterd_exe_version COMMAND musterd --version)
    set_tests_properties(musterd_exe_version PROPERTIES TIMEOUT 120
      PASS_REGULAR_EXPRESSION "^musterd ${PROJECT_VERSION} \\(protocol muster.v1, gRPC ")
    set(MUSTER_LINUX_BUILD_DIR ${PROJECT_SOURCE_DIR}/build CACHE PATH
      "A Linux build of muster whose bin/muster the interop tests run as agents")
    add_test(NAME musterd_linux_agents_test
      COMMAND bash ${PROJECT_SOURCE_DIR}/tests/windows/musterd_linux_agents_test.sh
              $<TARGET_FILE:musterd> ${MUSTER_LINUX_BUILD_DIR} ${MUSTER_WINE64})
    set_tests_properties(musterd_linux_agents_test PROPERTIES TIMEOUT 600 SKIP_RETURN_CODE 77
      LABELS "e2e;interop")
    # --http-listen: /healthz, /readyz, /metrics, the console and /api/v1 (with the admin
    # token) of musterd.exe under wine, read from Linux; a taken port refused; HTTPS with
    # --tls-cert; and muster.exe's --health-port while a win_worker.exe runs. Only with civetweb
    # (without it, common builds HttpServer's stand-in).
    if(TARGET civetweb::civetweb)
      set(_muster_agent_args)
      if(TARGET muster)
        set(_muster_agent_args $<TARGET_FILE:muster> $<TARGET_FILE:win_worker>)
      endif()
      add_test(NAME musterd_http_wine_test
        COMMAND bash ${PROJECT_SOURCE_DIR}/tests/windows/musterd_http_wine_test.sh
                $<TARGET_FILE:musterd> ${MUSTER_WINE64} ${_muster_agent_args})
      set_tests_properties(musterd_http_wine_test PROPERTIES TIMEOUT 300 LABELS "e2e;http")
    endif()
    # The MSI (deploy/msi/build-msi.sh) in a private wine prefix: install, the service through
    # the SCM, an upgrade that keeps the edited config, the uninstall. Skipped (77) without wixl.
    if(TARGET muster_comm_dll)
      add_test(NAME msi_wine_test
        COMMAND bash ${PROJECT_SOURCE_DIR}/tests/windows/msi_wine_test.sh ${CMAKE_BINARY_DIR}
                ${MUSTER_WINE64})
      set_tests_properties(msi_wine_test PROPERTIES TIMEOUT 900 SKIP_RETURN_CODE 77
        LABELS "e2e;msi")
    endif()
  endif()
  # muster.exe under wine: its Windows answers (launch_os) and a real launch of Windows workers
  # (win_worker.exe): the env contract, failures named, a restart, no worker outliving the
  # launcher (tests/windows/launcher_wine_test.sh runs natively: add_test(COMMAND bash) gets no
  # emulator).
  if(TARGET muster)
    muster_test(win_launch_test SRCS tests/windows/win_launch_test.cc DEPS muster_cli TIMEOUT 120)
    add_dependencies(win_launch_test win_test_helper)
    add_test(NAME launcher_wine_test
      COMMAND bash ${PROJECT_SOURCE_DIR}/tests/windows/launcher_wine_test.sh
              $<TARGET_FILE:muster> $<TARGET_FILE:win_worker> ${MUSTER_WINE64})
    set_tests_properties(launcher_wine_test PROPERTIES TIMEOUT 900 LABELS e2e)
    # `muster.exe stacks` on a running job of Windows workers: musterd.exe and two agents under
    # wine, 4 ranks of win_worker.exe hanging in named functions; Linux's JSON grouping, the odd
    # rank out named.
    if(TARGET musterd)
      add_test(NAME stacks_wine_test
        COMMAND bash ${PROJECT_SOURCE_DIR}/tests/windows/stacks_wine_test.sh
                $<TARGET_FILE:muster> $<TARGET_FILE:musterd> $<TARGET_FILE:win_worker>
                ${MUSTER_WINE64})
      set_tests_properties(stacks_wine_test PROPERTIES TIMEOUT 600 LABELS e2e)
    endif()
    # The agent's capture of a Python worker's stacks on Windows (the bootstrap's event and dump),
    # with win_worker.exe playing the bootstrap: wine has no Windows Python here.
    muster_test(win_python_stacks_test SRCS tests/windows/win_python_stacks_test.cc
                DEPS muster_agent TIMEOUT 180)
    add_dependencies(win_python_stacks_test win_worker)
    # muster doctor on Windows: the system collector (Net, netsh through the ToolRunner) and
    # `muster.exe doctor --json` under wine: the loopback interface, the firewall named unreadable.
    muster_test(win_doctor_test SRCS tests/windows/win_doctor_test.cc DEPS muster_doctor
                TIMEOUT 300)
    add_dependencies(win_doctor_test muster)
  endif()
  # The stand-in training program of the launcher tests (launcher_wine_test.sh, stacks_wine_test.sh)
  # and win_stacks_test: needs no gRPC.
  add_executable(win_worker tests/windows/win_worker.cc)
  target_compile_options(win_worker PRIVATE ${MUSTER_WARNINGS})
  target_include_directories(win_worker PRIVATE ${PROJECT_SOURCE_DIR})
  # ReadNativeStacks (DbgHelp) on a running win_worker.exe: its named functions, demangled; gone
  # processes; every thread resumed.
  muster_test(win_stacks_test SRCS tests/windows/win_stacks_test.cc
              DEPS muster_platform muster_platform_stacks TIMEOUT 180)
  add_dependencies(win_stacks_test win_worker)
  # The platform layer's windows/ side, on wine: processes in job objects (with a helper .exe
  # that echoes its argv, spawns a grandchild, crashes, ...), files, env, stop requests, the SCM.
  add_executable(win_test_helper tests/windows/win_test_helper.cc)
  target_compile_options(win_test_helper PRIVATE ${MUSTER_WARNINGS})
  target_include_directories(win_test_helper PRIVATE ${PROJECT_SOURCE_DIR})
  target_link_libraries(win_test_helper PRIVATE muster_platform muster_platform_service)
  foreach(t win_process win_files_env win_service)
    muster_test(${t}_test SRCS tests/windows/${t}_test.cc
                DEPS muster_platform muster_platform_service TIMEOUT 120)
    add_dependencies(${t}_test win_test_helper)
  endforeach()
  # The ToolRunner (muster doctor's netsh): both streams, exit codes, a stuck tool's job killed
  # at the deadline, wine's netsh.exe found. Needs no gRPC.
  muster_test(win_tool_runner_test SRCS tests/windows/win_tool_runner_test.cc
              DEPS muster_platform_net TIMEOUT 180)
  add_dependencies(win_tool_runner_test win_test_helper)
  if(Gloo_FOUND)
    # Gloo's libuv transport (the transport libmuster_comm will use on Windows): its FileStore
    # with binary values, and a 2-rank allreduce over 127.0.0.1.
    muster_test(gloo_uv_test SRCS tests/windows/gloo_uv_test.cc DEPS gloo TIMEOUT 180)
    # gloo::transport::uv::attr leaves its sockaddr fields uninitialized; copying it (CreateDevice
    # takes it by value) trips GCC's maybe-uninitialized.
    target_compile_options(gloo_uv_test PRIVATE -Wno-maybe-uninitialized)
  endif()
  if(TARGET muster_comm)
    # libmuster_comm: tests/comm's worker, ported, run as 2-rank processes under wine
    # (file://, tcp://, env://; every collective; a killed rank; stale and locked store files).
    add_executable(comm_worker tests/comm/comm_worker.cc tests/comm/collective_checks.cc)
    target_compile_options(comm_worker PRIVATE ${MUSTER_WARNINGS})
    target_include_directories(comm_worker PRIVATE ${PROJECT_SOURCE_DIR})
    target_link_libraries(comm_worker PRIVATE muster_comm)
    muster_test(win_comm_test SRCS tests/windows/win_comm_test.cc
                DEPS muster_comm muster_platform TIMEOUT 600)
    add_dependencies(win_comm_test comm_worker)
    # muster_comm.dll from C: tests/comm/c_api_test.c (three ranks as threads on a file:// store,
    # every call, the errors), linked against the import library only, so that it runs only if
    # Windows (wine) loads bin/muster_comm.dll beside it; and the DLL's tables: it exports the C
    # API and nothing else, and imports only Windows' own DLLs.
    add_executable(win_c_api_test tests/comm/c_api_test.c)
    set_source_files_properties(tests/comm/c_api_test.c PROPERTIES LANGUAGE C)
    target_compile_options(win_c_api_test PRIVATE -Wall -Wextra -Werror -pedantic)
    target_link_libraries(win_c_api_test PRIVATE muster_comm_dll Threads::Threads)
    add_test(NAME win_c_api_test COMMAND win_c_api_test)
    set_tests_properties(win_c_api_test PROPERTIES TIMEOUT 180
      PASS_REGULAR_EXPRESSION "c_api_test: OK" FAIL_REGULAR_EXPRESSION "failures")
    add_test(NAME muster_comm_dll_tables_test
      COMMAND bash ${PROJECT_SOURCE_DIR}/tests/windows/dll_tables_test.sh
              ${CMAKE_OBJDUMP} $<TARGET_FILE:muster_comm_dll> $<TARGET_LINKER_FILE:muster_comm_dll>
              $<TARGET_FILE:win_c_api_test> ${PROJECT_SOURCE_DIR}/comm/include/muster/comm/c_api.h)
    set_tests_properties(muster_comm_dll_tables_test PROPERTIES TIMEOUT 60)
  endif()
  # muster-bench.exe: two ranks under muster.exe --standalone on 127.0.0.1, tiny sizes, one batch,
  # libmuster_comm and raw Gloo (on libuv: the gloo:opt_* ones); the run works and prints its
  # tables (never a timing: benchmarks are not tests). And Gloo's bound-buffer classes, which the
  # libuv transport lacks, are refused by name.
  if(TARGET muster AND TARGET muster-bench)
    string(REPLACE "/" "\\" muster_bench_exe "Z:${CMAKE_BINARY_DIR}/bin/muster-bench.exe")
    add_test(NAME muster_bench_exe_smoke
      COMMAND muster --standalone --nproc-per-node=2 --no-python ${muster_bench_exe}
              --min=8 --max=1K --factor=8 --seconds=0.02 --batches=1
              --impls=muster,muster:ring_unbound,muster:bcube_unbound,gloo:opt_ring,gloo:opt_bcube)
    set_tests_properties(muster_bench_exe_smoke PROPERTIES TIMEOUT 300
      PASS_REGULAR_EXPRESSION "muster-bench gloo:opt_bcube allreduce, 2 ranks.*job .* succeeded")
    add_test(NAME muster_bench_exe_bound_buffers COMMAND muster-bench --impls=muster,gloo:ring)
    set_tests_properties(muster_bench_exe_bound_buffers PROPERTIES TIMEOUT 120
      PASS_REGULAR_EXPRESSION "gloo:ring needs Gloo's bound buffers, which its libuv transport")
  endif()
  # Interop the other way round: the Linux build's musterd serves one job of a Linux agent and
  # a Windows agent (muster.exe under wine): the env agrees, and so do collectives between a
  # Linux comm_worker and comm_worker.exe (on libmuster_comm's own mesh: Gloo's TCP and libuv
  # transports do not interoperate). Skipped (77) without the Linux build.
  if(TARGET muster AND TARGET comm_worker)
    add_test(NAME linux_musterd_mixed_agents_test
      COMMAND bash ${PROJECT_SOURCE_DIR}/tests/windows/linux_musterd_mixed_agents_test.sh
              $<TARGET_FILE:muster> $<TARGET_FILE:win_worker> $<TARGET_FILE:comm_worker>
              ${MUSTER_LINUX_BUILD_DIR} ${MUSTER_WINE64})
    set_tests_properties(linux_musterd_mixed_agents_test PROPERTIES TIMEOUT 900
      SKIP_RETURN_CODE 77 LABELS "e2e;interop")
    if(TARGET musterd)
      # The same job served by musterd.exe under wine.
      add_test(NAME windows_musterd_mixed_agents_test
        COMMAND bash ${PROJECT_SOURCE_DIR}/tests/windows/linux_musterd_mixed_agents_test.sh
                $<TARGET_FILE:muster> $<TARGET_FILE:win_worker> $<TARGET_FILE:comm_worker>
                ${MUSTER_LINUX_BUILD_DIR} ${MUSTER_WINE64} $<TARGET_FILE:musterd>)
      set_tests_properties(windows_musterd_mixed_agents_test PROPERTIES TIMEOUT 900
        SKIP_RETURN_CODE 77 LABELS "e2e;interop")
    endif()
  endif()
  # wine: no debug chatter in the test logs.
  get_property(muster_windows_tests DIRECTORY PROPERTY TESTS)
  foreach(t ${muster_windows_tests})
    set_property(TEST ${t} APPEND PROPERTY ENVIRONMENT "WINEDEBUG=-all")
  endforeach()
endif()
