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
  set(bitcode ${CMAKE_CURRENT_BINARY_DIR}/embedded/scalar_functions.bc)
  add_custom_command(
    OUTPUT ${bitcode}
    COMMAND ${KILN_CLANG} -x c++ -std=c++20 -O2 -fno-math-errno -ffp-contract=off -fwrapv
            -I${PROJECT_SOURCE_DIR} -emit-llvm -c
            ${PROJECT_SOURCE_DIR}/jit/llvm/bitcode/scalar_functions.cpp -o ${bitcode}
    DEPENDS ${PROJECT_SOURCE_DIR}/jit/llvm/bitcode/scalar_functions.cpp ${KILN_POINTWISE_HEADERS}
            ${PROJECT_SOURCE_DIR}/ops/cpu/vectorizable_math.h
    COMMENT "Compiling the pointwise functors to LLVM bitcode"
    VERBATIM)
  kiln_embed(kiln scalar_functions_bitcode BASE ${CMAKE_CURRENT_BINARY_DIR}/embedded
             FILES ${bitcode})
endif()
