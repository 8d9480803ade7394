# What `cmake --install` puts where, the CMake package for worker projects, and the .deb.
#
#   cmake --install build --prefix /usr/local     # binaries, headers, libraries, package, unit
#   (cd build && cpack -G DEB)                     # muster_<v>_<arch>.deb, muster-dev_<v>_<arch>.deb
#
# Layout (PREFIX = the install prefix):
#   PREFIX/bin/{muster,musterd}
#   PREFIX/include/muster/{platform,common,store,rendezvous,comm,v1}/...   public headers (v1: generated protos)
#   PREFIX/lib/libmuster_*.a, PREFIX/lib/cmake/muster/      find_package(muster) -> muster::comm
#   PREFIX/lib/muster/examples/train                         the demo trainer
#   PREFIX/lib/muster/tls/libmuster-civetweb-*.so            HTTPS: civetweb's way to OpenSSL 3
#   PREFIX/lib/muster/python/muster/                         import muster.torch: a directory of
#                                                            its own (the launcher adds only it)
#   /usr/lib/python3/dist-packages/muster.pth                the package: Debian's python3 finds it
#   PREFIX/share/doc/muster/                                 README, deployment guide, examples
#   the systemd unit and /etc/muster/musterd.conf: /lib/systemd/system and /etc/muster when
#   PREFIX is /usr (the package), else PREFIX/lib/systemd/system and PREFIX/etc/muster.
# Two components, two packages: `runtime` (muster: the programs, the unit, the config, the docs)
# and `dev` (muster-dev: headers, static libraries, the CMake package). Neither `cmake --install`
# nor the packages enable or start the service.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(MUSTER_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/muster)

# --- libraries: muster::<name without muster_>, with their public headers
set(_muster_exported_libraries
  muster_proto muster_platform muster_platform_net muster_common muster_store_core muster_store
  muster_rendezvous_core muster_rendezvous muster_comm)
# musterd's etcd client (replica mode): a link dependency of muster_rendezvous, no headers of its own.
if(TARGET muster_etcd_proto)
  list(APPEND _muster_exported_libraries muster_etcd_proto)
endif()
foreach(_lib IN LISTS _muster_exported_libraries)
  string(REGEX REPLACE "^muster_" "" _name ${_lib})
  set_target_properties(${_lib} PROPERTIES EXPORT_NAME ${_name})
  target_include_directories(${_lib} PUBLIC $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
endforeach()
set_target_properties(muster PROPERTIES EXPORT_NAME muster)
set_target_properties(musterd PROPERTIES EXPORT_NAME musterd)

install(TARGETS muster musterd EXPORT musterTargets
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
# HTTPS on musterd's --http-listen: the two libraries through which Debian's civetweb reaches
# OpenSSL 3 (common/src/civetweb_openssl/), in lib/muster/tls beside bin/, where musterd looks
# (not in lib/muster itself: a library directly under /usr/lib/muster makes CPack add ldconfig
# maintainer scripts, and the package has none).
if(TARGET muster_civetweb_libssl)
  install(TARGETS muster_civetweb_libssl muster_civetweb_libcrypto
    LIBRARY DESTINATION lib/muster/tls COMPONENT runtime)
endif()
install(TARGETS ${_muster_exported_libraries} EXPORT musterTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
foreach(_module platform common store rendezvous comm)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${_module}/include/
    DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev FILES_MATCHING PATTERN "*.h")
endforeach()
# The protocol's generated headers (rendezvous headers include muster/v1/rendezvous.pb.h).
install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/gen/muster/
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/muster COMPONENT dev FILES_MATCHING PATTERN "*.pb.h")

install(EXPORT musterTargets NAMESPACE muster:: DESTINATION ${MUSTER_INSTALL_CMAKEDIR}
  COMPONENT dev)
# Imported targets of the build that the package must recreate (see musterConfig.cmake.in).
if(TARGET civetweb::civetweb)
  set(MUSTER_PACKAGE_NEEDS_CIVETWEB ON)
else()
  set(MUSTER_PACKAGE_NEEDS_CIVETWEB OFF)
endif()
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/musterConfig.cmake.in
  ${PROJECT_BINARY_DIR}/musterConfig.cmake INSTALL_DESTINATION ${MUSTER_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/musterConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/musterConfig.cmake ${PROJECT_BINARY_DIR}/musterConfigVersion.cmake
  DESTINATION ${MUSTER_INSTALL_CMAKEDIR} COMPONENT dev)

# --- the Python package (python/CMakeLists.txt) in PREFIX/lib/muster/python, a directory that holds
# nothing else: the launcher puts it, and only it, on the workers' PYTHONPATH when their
# interpreter does not find `muster` by itself (a virtual environment: cli/python_interpreter.h),
# so Debian's packages never shadow the environment's. In the package (PREFIX /usr) a .pth file
# in Debian's dist-packages names it too, so that Debian's own python3 imports muster anywhere,
# as it did when the package lived there; a virtual environment reads no system .pth file.
if(TARGET muster_python)
  install(DIRECTORY ${MUSTER_PYTHON_DIR}/muster DESTINATION lib/muster/python
    COMPONENT runtime FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE)
  install(CODE "
    if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
      set(_pth \"${PROJECT_BINARY_DIR}/install-staging/muster.pth\")
      file(WRITE \"\${_pth}\" \"/usr/lib/muster/python\\n\")
      file(INSTALL DESTINATION \"/usr/lib/python3/dist-packages\" TYPE FILE FILES \"\${_pth}\")
    endif()
  " COMPONENT runtime)
endif()

# --- the demo trainer and the documentation
install(TARGETS train RUNTIME DESTINATION ${CMAKE_INSTALL_LIBDIR}/muster/examples
  COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${PROJECT_SOURCE_DIR}/docs/deployment.md
  ${PROJECT_SOURCE_DIR}/docs/security.md ${PROJECT_SOURCE_DIR}/deploy/systemd/musterd-security.conf
  ${PROJECT_SOURCE_DIR}/deploy/systemd/musterd-replica.conf
  ${PROJECT_SOURCE_DIR}/deploy/systemd/musterd-etcd-tls.conf
  DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/examples/train.cc ${PROJECT_SOURCE_DIR}/examples/ddp_train.py
  ${PROJECT_SOURCE_DIR}/examples/ddp_inplace.py
  ${PROJECT_SOURCE_DIR}/deploy/slurm/muster.sbatch
  DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples COMPONENT runtime)

# --- the systemd unit and the config file, with the install's own paths. At install time, so
# that `cmake --install --prefix P` and the package (prefix /usr, via DESTDIR) both get theirs.
install(CODE "
  set(_src \"${PROJECT_SOURCE_DIR}/deploy/systemd\")
  if(CMAKE_INSTALL_PREFIX STREQUAL \"/usr\")
    set(_unitdir \"/lib/systemd/system\")
    set(_confdir \"/etc/muster\")
  else()
    set(_unitdir \"\${CMAKE_INSTALL_PREFIX}/lib/systemd/system\")
    set(_confdir \"\${CMAKE_INSTALL_PREFIX}/etc/muster\")
  endif()
  file(READ \"\${_src}/musterd.service\" _unit)
  string(REPLACE \"/usr/bin/musterd\" \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/musterd\" _unit \"\${_unit}\")
  string(REPLACE \"/etc/muster/\" \"\${_confdir}/\" _unit \"\${_unit}\")
  set(_staged \"${PROJECT_BINARY_DIR}/install-staging/musterd.service\")
  file(WRITE \"\${_staged}\" \"\${_unit}\")
  file(INSTALL DESTINATION \"\${_unitdir}\" TYPE FILE FILES \"\${_staged}\")
  # An edited config is never overwritten (the package marks it a conffile instead).
  if(NOT EXISTS \"\$ENV{DESTDIR}\${_confdir}/musterd.conf\")
    file(INSTALL DESTINATION \"\${_confdir}\" TYPE FILE FILES \"\${_src}/musterd.conf\")
  endif()
" COMPONENT runtime)

# --- the Debian package: cpack -G DEB in the build directory
set(CPACK_PACKAGE_NAME muster)
set(CPACK_PACKAGE_VENDOR muster)
set(CPACK_PACKAGE_CONTACT "muster maintainers <muster@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "distributed launcher and rendezvous server for data-parallel training")
set(CPACK_GENERATOR DEB)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME muster)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME muster-dev)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
  "distributed launcher and rendezvous server for data-parallel training
muster launches distributed training jobs the way torchrun does, for any program, with
torchrun's flags and worker environment. musterd is its gRPC rendezvous server, shipped as a
systemd unit that is installed but neither enabled nor started.")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "muster: libraries and headers for C++ workers
libmuster_comm gives C++ workers collectives (Gloo over TCP) bootstrapped through musterd.
Static libraries, headers and a CMake package: find_package(muster) gives muster::comm.")
# Installed with DESTDIR and the prefix /usr, so that the unit lands in /lib/systemd/system and
# the config in /etc/muster (the install(CODE) above; file(INSTALL) adds DESTDIR itself).
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION net)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# muster's Depends: the runtime libraries its programs link, found by dpkg-shlibdeps
# (libgrpc++1.51, libprotobuf32, libabsl20220623, libgloo0, libsystemd0, ...).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
# import muster.torch needs torch (Debian's, or a virtual environment's); the package itself needs
# only Python's standard library (its Store client speaks gRPC itself: python/muster/_h2.py).
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SUGGESTS "muster-dev, python3-torch")
# muster-dev: what a worker project linking the static libraries needs to build.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "muster (= ${PROJECT_VERSION}), libgrpc++-dev, libprotobuf-dev, protobuf-compiler-grpc, libabsl-dev, libgloo-dev, libcivetweb-dev, cmake")
# No maintainer scripts: nothing is enabled, started or created on install (the unit uses
# DynamicUser, so no user account is needed). The config file is a conffile.
set(_conffiles ${PROJECT_BINARY_DIR}/install-staging/conffiles)
file(WRITE ${_conffiles} "/etc/muster/musterd.conf\n")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA ${_conffiles})
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
