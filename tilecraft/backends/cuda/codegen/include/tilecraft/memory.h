// tilecraft/memory.h -- vector loads and stores of 2, 4, 8 and 16 bytes.
//
// Naming: <op>_<space>_<bits>, with op in {ld, st}, space in {global, shared, regs}, bits in
// {16, 32, 64, 128}. Values travel as raw bits:
//     16 -> uint16_t, 32 -> uint32_t, 64 -> uint2, 128 -> uint4.
// Pointers must be aligned to the access size. Unpredicated forms are plain C++ accesses, so
// the compiler may schedule and combine them; `_pred` forms are inline PTX:
//   ld_*_pred(ptr, pred)        returns the loaded value when pred, else all-zero bits (the
//                               memory is not touched when pred is false, ptr may be invalid)
//   st_*_pred(ptr, value, pred) stores only when pred
// Shared-memory forms also accept a 32-bit shared-window address (from tc::smem_addr) in
// place of the pointer.
#pragma once

#include "types.h"

namespace tc {

// Generic pointer into shared memory -> 32-bit address in the shared window (cvta.to.shared).
TC_DEVICE uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ---------------------------------------------------------------- global, unpredicated
TC_DEVICE uint16_t ld_global_16(const void* p) { return *static_cast<const uint16_t*>(p); }
TC_DEVICE uint32_t ld_global_32(const void* p) { return *static_cast<const uint32_t*>(p); }
TC_DEVICE uint2 ld_global_64(const void* p) { return *static_cast<const uint2*>(p); }
TC_DEVICE uint4 ld_global_128(const void* p) { return *static_cast<const uint4*>(p); }

TC_DEVICE void st_global_16(void* p, uint16_t v) { *static_cast<uint16_t*>(p) = v; }
TC_DEVICE void st_global_32(void* p, uint32_t v) { *static_cast<uint32_t*>(p) = v; }
TC_DEVICE void st_global_64(void* p, uint2 v) { *static_cast<uint2*>(p) = v; }
TC_DEVICE void st_global_128(void* p, uint4 v) { *static_cast<uint4*>(p) = v; }

// ---------------------------------------------------------------- global, predicated
TC_DEVICE uint16_t ld_global_16_pred(const void* p, bool pred) {
  uint16_t r;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b16 %0, 0;\n"
      " @p ld.global.b16 %0, [%1];\n}\n"
      : "=h"(r) : "l"(p), "r"(static_cast<int>(pred)));
  return r;
}
TC_DEVICE uint32_t ld_global_32_pred(const void* p, bool pred) {
  uint32_t r;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n mov.b32 %0, 0;\n"
      " @p ld.global.b32 %0, [%1];\n}\n"
      : "=r"(r) : "l"(p), "r"(static_cast<int>(pred)));
  return r;
}
TC_DEVICE uint2 ld_global_64_pred(const void* p, bool pred) {
  uint2 r;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n mov.b32 %0, 0;\n mov.b32 %1, 0;\n"
      " @p ld.global.v2.b32 {%0, %1}, [%2];\n}\n"
      : "=r"(r.x), "=r"(r.y) : "l"(p), "r"(static_cast<int>(pred)));
  return r;
}
TC_DEVICE uint4 ld_global_128_pred(const void* p, bool pred) {
  uint4 r;
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
      " @p ld.global.v4.b32 {%0, %1, %2, %3}, [%4];\n}\n"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p), "r"(static_cast<int>(pred)));
  return r;
}

TC_DEVICE void st_global_16_pred(void* p, uint16_t v, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p st.global.b16 [%0], %1;\n}\n"
      :: "l"(p), "h"(v), "r"(static_cast<int>(pred)) : "memory");
}
TC_DEVICE void st_global_32_pred(void* p, uint32_t v, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %2, 0;\n @p st.global.b32 [%0], %1;\n}\n"
      :: "l"(p), "r"(v), "r"(static_cast<int>(pred)) : "memory");
}
TC_DEVICE void st_global_64_pred(void* p, uint2 v, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %3, 0;\n @p st.global.v2.b32 [%0], {%1, %2};\n}\n"
      :: "l"(p), "r"(v.x), "r"(v.y), "r"(static_cast<int>(pred)) : "memory");
}
TC_DEVICE void st_global_128_pred(void* p, uint4 v, bool pred) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
      " @p st.global.v4.b32 [%0], {%1, %2, %3, %4};\n}\n"
      :: "l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(static_cast<int>(pred))
      : "memory");
}

// ---------------------------------------------------------------- shared, generic pointer
TC_DEVICE uint16_t ld_shared_16(const void* p) { return *static_cast<const uint16_t*>(p); }
TC_DEVICE uint32_t ld_shared_32(const void* p) { return *static_cast<const uint32_t*>(p); }
TC_DEVICE uint2 ld_shared_64(const void* p) { return *static_cast<const uint2*>(p); }
TC_DEVICE uint4 ld_shared_128(const void* p) { return *static_cast<const uint4*>(p); }

TC_DEVICE void st_shared_16(void* p, uint16_t v) { *static_cast<uint16_t*>(p) = v; }
TC_DEVICE void st_shared_32(void* p, uint32_t v) { *static_cast<uint32_t*>(p) = v; }
TC_DEVICE void st_shared_64(void* p, uint2 v) { *static_cast<uint2*>(p) = v; }
TC_DEVICE void st_shared_128(void* p, uint4 v) { *static_cast<uint4*>(p) = v; }

// ---------------------------------------------------------------- shared, 32-bit address
TC_DEVICE uint16_t ld_shared_16(uint32_t a) {
  uint16_t r;
  asm volatile("ld.shared.b16 %0, [%1];\n" : "=h"(r) : "r"(a) : "memory");
  return r;
}
TC_DEVICE uint32_t ld_shared_32(uint32_t a) {
  uint32_t r;
  asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(r) : "r"(a) : "memory");
  return r;
}
TC_DEVICE uint2 ld_shared_64(uint32_t a) {
  uint2 r;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];\n" : "=r"(r.x), "=r"(r.y) : "r"(a) : "memory");
  return r;
}
TC_DEVICE uint4 ld_shared_128(uint32_t a) {
  uint4 r;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "r"(a) : "memory");
  return r;
}
TC_DEVICE void st_shared_16(uint32_t a, uint16_t v) {
  asm volatile("st.shared.b16 [%0], %1;\n" :: "r"(a), "h"(v) : "memory");
}
TC_DEVICE void st_shared_32(uint32_t a, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" :: "r"(a), "r"(v) : "memory");
}
TC_DEVICE void st_shared_64(uint32_t a, uint2 v) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};\n" :: "r"(a), "r"(v.x), "r"(v.y) : "memory");
}
TC_DEVICE void st_shared_128(uint32_t a, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n"
               :: "r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
}

// ---------------------------------------------------------------- shared, predicated
TC_DEVICE uint32_t ld_shared_32_pred(const void* p, bool pred) {
  return pred ? ld_shared_32(smem_addr(p)) : 0u;
}
TC_DEVICE uint2 ld_shared_64_pred(const void* p, bool pred) {
  return pred ? ld_shared_64(smem_addr(p)) : make_uint2(0u, 0u);
}
TC_DEVICE uint4 ld_shared_128_pred(const void* p, bool pred) {
  return pred ? ld_shared_128(smem_addr(p)) : make_uint4(0u, 0u, 0u, 0u);
}
TC_DEVICE uint16_t ld_shared_16_pred(const void* p, bool pred) {
  return pred ? ld_shared_16(smem_addr(p)) : static_cast<uint16_t>(0);
}
TC_DEVICE void st_shared_16_pred(void* p, uint16_t v, bool pred) {
  if (pred) st_shared_16(smem_addr(p), v);
}
TC_DEVICE void st_shared_32_pred(void* p, uint32_t v, bool pred) {
  if (pred) st_shared_32(smem_addr(p), v);
}
TC_DEVICE void st_shared_64_pred(void* p, uint2 v, bool pred) {
  if (pred) st_shared_64(smem_addr(p), v);
}
TC_DEVICE void st_shared_128_pred(void* p, uint4 v, bool pred) {
  if (pred) st_shared_128(smem_addr(p), v);
}

// ---------------------------------------------------------------- a thread's register array
// The raw bits of a vector access moved into (st_regs) or out of (ld_regs) consecutive
// elements of a thread's register array, which need no alignment: memcpy of a constant size at
// a constant offset, which the compiler turns into register moves once loops are unrolled.
TC_DEVICE void st_regs_16(void* r, uint16_t v) { memcpy(r, &v, 2); }
TC_DEVICE void st_regs_32(void* r, uint32_t v) { memcpy(r, &v, 4); }
TC_DEVICE void st_regs_64(void* r, uint2 v) { memcpy(r, &v, 8); }
TC_DEVICE void st_regs_128(void* r, uint4 v) { memcpy(r, &v, 16); }

TC_DEVICE uint16_t ld_regs_16(const void* r) { uint16_t v; memcpy(&v, r, 2); return v; }
TC_DEVICE uint32_t ld_regs_32(const void* r) { uint32_t v; memcpy(&v, r, 4); return v; }
TC_DEVICE uint2 ld_regs_64(const void* r) { uint2 v; memcpy(&v, r, 8); return v; }
TC_DEVICE uint4 ld_regs_128(const void* r) { uint4 v; memcpy(&v, r, 16); return v; }

}  // namespace tc
