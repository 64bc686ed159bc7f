# FindK3OpenBLAS.cmake — OpenBLAS, preferring Debian's OpenMP build.
#
# Why the OpenMP flavour: k3serve's own kernels parallelise with OpenMP. OpenBLAS built for
# OpenMP runs single-threaded when called inside a parallel region and shares the same thread
# pool outside one, so the two never oversubscribe the cores. Debian installs both flavours
# under one soname (libopenblas.so.0) chosen by update-alternatives; we link the OpenMP one by
# full path and CMake records its directory in the RPATH, so the alternatives choice does not
# matter at run time.
#
# Provides: K3::openblas (imported), K3_OPENBLAS_FLAVOUR (openmp|pthread|unknown).

find_path(K3_CBLAS_INCLUDE_DIR cblas.h
  HINTS /usr/include/x86_64-linux-gnu/openblas-openmp /usr/include/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp
  NO_DEFAULT_PATH)
find_library(K3_OPENBLAS_LIBRARY NAMES openblas
  HINTS /usr/lib/x86_64-linux-gnu/openblas-openmp /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp
  NO_DEFAULT_PATH)
set(K3_OPENBLAS_FLAVOUR openmp)
if(NOT K3_OPENBLAS_LIBRARY OR NOT K3_CBLAS_INCLUDE_DIR)
  find_path(K3_CBLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas openblas-pthread)
  find_library(K3_OPENBLAS_LIBRARY NAMES openblas)
  set(K3_OPENBLAS_FLAVOUR unknown)
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(K3OpenBLAS REQUIRED_VARS K3_OPENBLAS_LIBRARY K3_CBLAS_INCLUDE_DIR)

if(K3OpenBLAS_FOUND AND NOT TARGET K3::openblas)
  add_library(K3::openblas UNKNOWN IMPORTED)
  set_target_properties(K3::openblas PROPERTIES
    IMPORTED_LOCATION "${K3_OPENBLAS_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${K3_CBLAS_INCLUDE_DIR}")
endif()
