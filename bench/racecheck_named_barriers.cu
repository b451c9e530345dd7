// What compute-sanitizer's racecheck says of the seesaw_warpgroups handoff alone: two
// warpgroups pass a row vector through shared memory, one writing it and announcing it on named
// barrier 2 (3 the other way), the other waiting there before it reads. The protocol is ordered
// by the PTX memory model either way (bar.arrive releases, bar.sync acquires). Flags:
//   s = the writer waits too (bar.sync instead of bar.arrive)
//   p = a producer warpgroup (384 threads, idle after the first __syncthreads)
//   l = warpgroup-local bar.sync 4 / 5 (128 threads) around the write, as the kernel has
//   c = the consumers' barrier 1 (256 threads) before the loop
//
//   nvcc -arch=sm_90a -lineinfo -o racecheck_named_barriers bench/racecheck_named_barriers.cu
//   for f in s sp sl sc splc _ p l c; do
//     compute-sanitizer --tool racecheck ./racecheck_named_barriers $f; done
#include <cstdio>
#include <cstring>
__device__ __forceinline__ void bsync(int id, int n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void barrive(int id, int n) { asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(n) : "memory"); }
__global__ void handoff(float* out, int pairs, bool sync_publish, bool local, bool consumer_bar) {
  __shared__ float box[2][64];
  int tx = threadIdx.x, wtx = tx % 128;
  __syncthreads();
  if (tx >= 256) return;
  if (consumer_bar) bsync(1, 256);
  int wg = __shfl_sync(0xffffffffu, tx >> 7, 0);
  float carried = 0.f, acc = 0.f;
  for (int i = 0; i < pairs; ++i) {
    if (wg == 0) {
      carried += 1.f;
      if (local) bsync(4, 128);
      if (wtx % 4 == 0) box[0][wtx / 2 % 64] = carried;
      if (sync_publish) bsync(2, 256); else barrive(2, 256);
      if (local) bsync(4, 128);
      bsync(3, 256);
      carried = box[1][wtx / 2 % 64];
      acc += carried;
    } else {
      bsync(2, 256);
      carried = box[0][wtx / 2 % 64];
      carried += 1.f;
      if (local) bsync(5, 128);
      if (wtx % 4 == 0) box[1][wtx / 2 % 64] = carried;
      if (sync_publish) bsync(3, 256); else barrive(3, 256);
      if (local) bsync(5, 128);
      acc += carried;
    }
  }
  out[blockIdx.x * 256 + tx] = acc;
}
int main(int argc, char** argv) {
  float* out; cudaMalloc(&out, 4 * 256 * sizeof(float));
  const char* f = argv[1];
  int threads = strchr(f, 'p') ? 384 : 256;
  handoff<<<4, threads>>>(out, 8, strchr(f, 's') != nullptr, strchr(f, 'l') != nullptr, strchr(f, 'c') != nullptr);
  float h[256]; cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost);
  printf("%s done %f %f\n", f, h[0], h[200]);
  return 0;
}
