// tilecraft/mma.h -- ldmatrix / stmatrix and warp-level mma.sync.
//
// All functions here are warp-collective: every lane of the warp must call them together
// (.sync.aligned), with the same arguments apart from addresses and registers.
//
// Notation for fragments (PTX ISA "Matrix fragments for mma.m16n8k*"), per lane:
//   g = lane / 4   ("groupID"),   t = lane % 4   ("threadID_in_group").
// A register holding two 16-bit elements keeps the lower column/row index in bits 0..15;
// a register holding four 8-bit elements keeps them in ascending index order from bit 0.
// (tc::pack_half2(lo, hi) / tc::pack_bf162 build such words.)
//
// ---------------------------------------------------------------- ldmatrix / stmatrix
// ldmatrix_xN(regs, p): loads N (1, 2, 4) 8x8 matrices of 16-bit elements from shared memory.
//   Addresses: lane i (i < 8*N) passes the address of row (i % 8) of matrix (i / 8); each row
//   is 16 contiguous bytes, 16-byte aligned. Lanes >= 8*N still call, their address is unused.
//   Result: regs[j] holds matrix j, row g, columns 2t and 2t+1 (lo, hi).
//   _trans: regs[j] holds matrix j transposed: elements (row 2t, col g) and (row 2t+1, col g).
// stmatrix_xN(p, regs) [sm_90+]: the inverse: stores regs[j] (same fragment as above) into
//   the rows whose addresses the lanes pass (same address rule); _trans likewise.
//   stmatrix_x4(p, r0, r1, r2, r3) takes the four words by value.
// Both have overloads taking a 32-bit shared-window address (tc::smem_addr) for p.
//
// ---------------------------------------------------------------- mma.sync
// D = A * B + C, A row-major (M x K), B column-major (K x N), all shapes are per warp.
// d and c may alias (accumulate in place). The mma wrappers are pure (non-volatile asm), so
// the compiler may reorder them and drops one whose result is unused.
//
// mma_m16n8k16_f16_f32 (A, B .f16), mma_m16n8k16_bf16_f32 (A, B .bf16), f32 accumulate:
//   a: 4 x uint32 (8 elements of A 16x16)   a[0] = A[g  ][2t..2t+1]   a[1] = A[g+8][2t..2t+1]
//                                            a[2] = A[g  ][2t+8..+9]   a[3] = A[g+8][2t+8..+9]
//   b: 2 x uint32 (4 elements of B 16x8)    b[0] = B[2t..2t+1][g]     b[1] = B[2t+8..2t+9][g]
//   c, d: 4 x float (C/D 16x8)              c[0] = C[g][2t]   c[1] = C[g][2t+1]
//                                            c[2] = C[g+8][2t] c[3] = C[g+8][2t+1]
// mma_m16n8k16_f16_f16: same a, b; c, d are 2 x uint32 of f16x2:
//                                            c[0] = C[g][2t..2t+1]     c[1] = C[g+8][2t..2t+1]
// mma_m16n8k32_s8_s32 / _u8_s32 (A, B 8-bit integers, s32 accumulate, wrapping):
//   a: 4 x uint32 (16 bytes of A 16x32)     a[0] = A[g  ][4t..4t+3]   a[1] = A[g+8][4t..4t+3]
//                                            a[2] = A[g  ][4t+16..+19] a[3] = A[g+8][4t+16..+19]
//   b: 2 x uint32 (8 bytes of B 32x8)       b[0] = B[4t..4t+3][g]     b[1] = B[4t+16..4t+19][g]
//   c, d: 4 x int32, same positions as the f32 accumulator above.
// mma_m16n8k32_e4m3_f32 [sm_89+] (A, B fp8 e4m3, f32 accumulate): a, b as for s8; c, d as f32.
// mma_m16n8k8_tf32_f32 (A, B tf32 in 32-bit registers, see tc::to_tf32):
//   a: 4 x uint32 (A 16x8)                  a[0] = A[g][t]   a[1] = A[g+8][t]
//                                            a[2] = A[g][t+4] a[3] = A[g+8][t+4]
//   b: 2 x uint32 (B 8x8)                   b[0] = B[t][g]   b[1] = B[t+4][g]
//   c, d: 4 x float, as for m16n8k16.
// mma_m8n8k4_f64 (A, B, C, D double):
//   a: 1 x double (A 8x4)   a[0] = A[g][t]
//   b: 1 x double (B 4x8)   b[0] = B[t][g]
//   c, d: 2 x double (8x8)  c[0] = C[g][2t]   c[1] = C[g][2t+1]
//
// Feature macros: TC_HAS_STMATRIX (sm_90+), TC_HAS_FP8_MMA (sm_89+) are 1 when the functions
// are available in the current device pass. On older targets those functions are not
// declared, so a call is a compile error rather than a silent fallback.
#pragma once

#include "memory.h"

#define TC_HAS_STMATRIX (TC_CUDA_ARCH >= 900)
#define TC_HAS_FP8_MMA (TC_CUDA_ARCH >= 890)

namespace tc {

// ---------------------------------------------------------------- ldmatrix
TC_DEVICE void ldmatrix_x1(uint32_t* r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(a) : "memory");
}
TC_DEVICE void ldmatrix_x2(uint32_t* r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(a) : "memory");
}
TC_DEVICE void ldmatrix_x4(uint32_t* r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
TC_DEVICE void ldmatrix_x1_trans(uint32_t* r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
               : "=r"(r[0]) : "r"(a) : "memory");
}
TC_DEVICE void ldmatrix_x2_trans(uint32_t* r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1]) : "r"(a) : "memory");
}
TC_DEVICE void ldmatrix_x4_trans(uint32_t* r, uint32_t a) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a) : "memory");
}
TC_DEVICE void ldmatrix_x1(uint32_t* r, const void* p) { ldmatrix_x1(r, smem_addr(p)); }
TC_DEVICE void ldmatrix_x2(uint32_t* r, const void* p) { ldmatrix_x2(r, smem_addr(p)); }
TC_DEVICE void ldmatrix_x4(uint32_t* r, const void* p) { ldmatrix_x4(r, smem_addr(p)); }
TC_DEVICE void ldmatrix_x1_trans(uint32_t* r, const void* p) { ldmatrix_x1_trans(r, smem_addr(p)); }
TC_DEVICE void ldmatrix_x2_trans(uint32_t* r, const void* p) { ldmatrix_x2_trans(r, smem_addr(p)); }
TC_DEVICE void ldmatrix_x4_trans(uint32_t* r, const void* p) { ldmatrix_x4_trans(r, smem_addr(p)); }

// ---------------------------------------------------------------- stmatrix (sm_90+)
#if TC_HAS_STMATRIX
TC_DEVICE void stmatrix_x1(uint32_t a, const uint32_t* r) {
  asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n"
               :: "r"(a), "r"(r[0]) : "memory");
}
TC_DEVICE void stmatrix_x2(uint32_t a, const uint32_t* r) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n"
               :: "r"(a), "r"(r[0]), "r"(r[1]) : "memory");
}
TC_DEVICE void stmatrix_x4(uint32_t a, const uint32_t* r) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(a), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
TC_DEVICE void stmatrix_x1_trans(uint32_t a, const uint32_t* r) {
  asm volatile("stmatrix.sync.aligned.m8n8.x1.trans.shared.b16 [%0], {%1};\n"
               :: "r"(a), "r"(r[0]) : "memory");
}
TC_DEVICE void stmatrix_x2_trans(uint32_t a, const uint32_t* r) {
  asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1, %2};\n"
               :: "r"(a), "r"(r[0]), "r"(r[1]) : "memory");
}
TC_DEVICE void stmatrix_x4_trans(uint32_t a, const uint32_t* r) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(a), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
}
TC_DEVICE void stmatrix_x1(void* p, const uint32_t* r) { stmatrix_x1(smem_addr(p), r); }
TC_DEVICE void stmatrix_x2(void* p, const uint32_t* r) { stmatrix_x2(smem_addr(p), r); }
TC_DEVICE void stmatrix_x4(void* p, const uint32_t* r) { stmatrix_x4(smem_addr(p), r); }
TC_DEVICE void stmatrix_x1_trans(void* p, const uint32_t* r) { stmatrix_x1_trans(smem_addr(p), r); }
TC_DEVICE void stmatrix_x2_trans(void* p, const uint32_t* r) { stmatrix_x2_trans(smem_addr(p), r); }
TC_DEVICE void stmatrix_x4_trans(void* p, const uint32_t* r) { stmatrix_x4_trans(smem_addr(p), r); }
// The four words by value (an accumulator packed on the fly: no array in local memory).
TC_DEVICE void stmatrix_x4(void* p, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n"
               :: "r"(smem_addr(p)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
#endif  // TC_HAS_STMATRIX

// ---------------------------------------------------------------- mma.sync, f32 accumulate
TC_DEVICE void mma_m16n8k16_f16_f32(float* d, const uint32_t* a, const uint32_t* b,
                                    const float* c) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
TC_DEVICE void mma_m16n8k16_bf16_f32(float* d, const uint32_t* a, const uint32_t* b,
                                     const float* c) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

// ---------------------------------------------------------------- mma.sync, f16 accumulate
TC_DEVICE void mma_m16n8k16_f16_f16(uint32_t* d, const uint32_t* a, const uint32_t* b,
                                    const uint32_t* c) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f16.f16.f16.f16 "
      "{%0, %1}, {%2, %3, %4, %5}, {%6, %7}, {%8, %9};\n"
      : "=r"(d[0]), "=r"(d[1])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "r"(c[0]), "r"(c[1]));
}
// The same on an accumulator fragment of halves (four per atom, as c[0..1] hold them).
TC_DEVICE void mma_m16n8k16_f16_f16(half_t* d, const uint32_t* a, const uint32_t* b,
                                    const half_t* c) {
  mma_m16n8k16_f16_f16(reinterpret_cast<uint32_t*>(d), a, b,
                       reinterpret_cast<const uint32_t*>(c));
}

// ---------------------------------------------------------------- mma.sync, 8-bit integers
TC_DEVICE void mma_m16n8k32_s8_s32(int* d, const uint32_t* a, const uint32_t* b, const int* c) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}
TC_DEVICE void mma_m16n8k32_u8_s32(int* d, const uint32_t* a, const uint32_t* b, const int* c) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.s32.u8.u8.s32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=r"(d[0]), "=r"(d[1]), "=r"(d[2]), "=r"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "r"(c[0]), "r"(c[1]), "r"(c[2]), "r"(c[3]));
}

// ---------------------------------------------------------------- mma.sync, fp8 (sm_89+)
#if TC_HAS_FP8_MMA
TC_DEVICE void mma_m16n8k32_e4m3_f32(float* d, const uint32_t* a, const uint32_t* b,
                                     const float* c) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
TC_DEVICE void mma_m16n8k32_e5m2_f32(float* d, const uint32_t* a, const uint32_t* b,
                                     const float* c) {
  asm(
      "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}
#endif  // TC_HAS_FP8_MMA

// ---------------------------------------------------------------- mma.sync, tf32 and f64
// float -> tf32 bit pattern (round to nearest, ties away from zero: cvt.rna.tf32.f32).
TC_DEVICE uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

// The same for a float held as its bits (what ldmatrix leaves in a register).
TC_DEVICE uint32_t tf32_of_bits(uint32_t bits) { return to_tf32(__uint_as_float(bits)); }

TC_DEVICE void mma_m16n8k8_tf32_f32(float* d, const uint32_t* a, const uint32_t* b,
                                    const float* c) {
  asm(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]),
        "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
}

TC_DEVICE void mma_m8n8k4_f64(double* d, const double* a, const double* b, const double* c) {
  asm(
      "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%4, %5};\n"
      : "=d"(d[0]), "=d"(d[1])
      : "d"(a[0]), "d"(b[0]), "d"(c[0]), "d"(c[1]));
}

}  // namespace tc
