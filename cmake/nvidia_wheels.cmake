# cuBLAS, cuSOLVER and NCCL's header from NVIDIA's PyPI wheels, for a machine that has nvcc
# and the CUDA runtime but not those libraries (this project's build machines: the CUDA toolkit
# there is the compiler and cudart only). tools/setup.sh installs the wheels of
# tools/cuda-requirements.txt into CZ_NVIDIA_WHEELS (.nvidia/ at the repository's root) when
# nvcc is present; this defines the imported targets FindCUDAToolkit would have (CUDA::cublas,
# CUDA::cusolver) from there when it found none, so that the GPU plugin compiles and links in
# every build that has a compiler for it. The wheels ship versioned names only
# (libcublas.so.13), which find_library does not take: the targets name the files. Their
# dependencies (cuBLASLt, cuSPARSE, nvJitLink) are in the same folder, found at link time
# through -rpath-link. At run time the plugin searches the machine for its libraries (the build
# tree's copy also has CMake's build run path to these); installed and packaged plugins carry
# no path into the wheels.
set(CZ_NVIDIA_WHEELS "${PROJECT_SOURCE_DIR}/.nvidia" CACHE PATH
    "Folder of NVIDIA's CUDA wheels (tools/cuda-requirements.txt), used when the CUDA toolkit has no cuBLAS")

function(cz_nvidia_wheel_target name lib)
  set(root "${CZ_NVIDIA_WHEELS}/nvidia/cu13")
  file(GLOB found "${root}/lib/lib${lib}.so.[0-9]*")
  list(FILTER found EXCLUDE REGEX "\\.so\\.[0-9]+\\.[0-9]")
  if(TARGET CUDA::${name} OR NOT found OR NOT EXISTS "${root}/include")
    return()
  endif()
  list(GET found 0 file)
  add_library(CUDA::${name} SHARED IMPORTED GLOBAL)
  set_target_properties(CUDA::${name} PROPERTIES
    IMPORTED_LOCATION "${file}"
    INTERFACE_INCLUDE_DIRECTORIES "${root}/include;${CUDAToolkit_INCLUDE_DIRS}"
    INTERFACE_LINK_OPTIONS "LINKER:-rpath-link,${root}/lib")
  message(STATUS "canzona: ${name} from ${file}")
endfunction()

if(CUDAToolkit_FOUND)
  cz_nvidia_wheel_target(cublas cublas)
  cz_nvidia_wheel_target(cusolver cusolver)
endif()
