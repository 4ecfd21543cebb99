# What the JITs embed in libkiln (jit/embedded_files.h): the headers of the pointwise
# functors for NVRTC, and the same functors compiled to LLVM bitcode by the clang that
# matches the LLVM of the CPU JIT (KILN_CLANG, found beside it).
include(${CMAKE_CURRENT_LIST_DIR}/embed.cmake)

set(KILN_POINTWISE_HEADERS
  ${PROJECT_SOURCE_DIR}/ops/pointwise_math.h ${PROJECT_SOURCE_DIR}/ops/op_id.h
  ${PROJECT_SOURCE_DIR}/ops/ops.def ${PROJECT_SOURCE_DIR}/runtime/macros.h
  ${PROJECT_SOURCE_DIR}/ops/philox.h)

if(KILN_HAVE_CUDA)
  kiln_embed(kiln nvrtc_headers BASE ${PROJECT_SOURCE_DIR} FILES ${KILN_POINTWISE_HEADERS})
endif()

if(KILN_HAVE_LLVM)
  # scalar_functions.bc: every pointwise functor, for any x86-64; vector_functions.bc: the
  # 8-lane xsimd forms the JIT maps some of them onto where the host has AVX2 and FMA.
  set(bitcode ${CMAKE_CURRENT_BINARY_DIR}/embedded/scalar_functions.bc)
  set(vector_bitcode ${CMAKE_CURRENT_BINARY_DIR}/embedded/vector_functions.bc)
  add_custom_command(
    OUTPUT ${bitcode}
    COMMAND ${KILN_CLANG} -x c++ -std=c++20 -O2 -fno-math-errno -ffp-contract=off -fwrapv
            -I${PROJECT_SOURCE_DIR} -emit-llvm -c
            ${PROJECT_SOURCE_DIR}/jit/llvm/bitcode/scalar_functions.cpp -o ${bitcode}
    DEPENDS ${PROJECT_SOURCE_DIR}/jit/llvm/bitcode/scalar_functions.cpp ${KILN_POINTWISE_HEADERS}
            ${PROJECT_SOURCE_DIR}/ops/cpu/vectorizable_math.h
    COMMENT "Compiling the pointwise functors to LLVM bitcode"
    VERBATIM)
  get_target_property(xsimd_include xsimd INTERFACE_INCLUDE_DIRECTORIES)
  set(xsimd_flags "")
  if(xsimd_include)
    list(TRANSFORM xsimd_include PREPEND "-I" OUTPUT_VARIABLE xsimd_flags)
  endif()
  add_custom_command(
    OUTPUT ${vector_bitcode}
    COMMAND ${KILN_CLANG} -x c++ -std=c++20 -O2 -mavx2 -mfma -fno-exceptions -fno-math-errno
            -ffp-contract=fast -fwrapv -I${PROJECT_SOURCE_DIR} ${xsimd_flags}
            -emit-llvm -c ${PROJECT_SOURCE_DIR}/jit/llvm/bitcode/vector_functions.cpp
            -o ${vector_bitcode}
    DEPENDS ${PROJECT_SOURCE_DIR}/jit/llvm/bitcode/vector_functions.cpp ${KILN_POINTWISE_HEADERS}
            ${PROJECT_SOURCE_DIR}/ops/cpu/arch/pointwise_simd.h ${PROJECT_SOURCE_DIR}/ops/cpu/simd.h
    COMMENT "Compiling the xsimd vector forms to LLVM bitcode"
    COMMAND_EXPAND_LISTS
    VERBATIM)
  kiln_embed(kiln scalar_functions_bitcode BASE ${CMAKE_CURRENT_BINARY_DIR}/embedded
             FILES ${bitcode} ${vector_bitcode})
endif()
