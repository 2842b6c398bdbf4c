// Multi-tensor launches, the idea of PyTorch's multi_tensor_apply: one kernel launch updates many
// tensors (every gradient of a model, every parameter of an optimizer), and its grid is sized by
// the work, not by the number of tensors. The host cuts each tensor into chunks of kChunk
// elements and gives every block one (tensor, chunk) pair through a table passed with the kernel's
// arguments; a launch goes out whenever the table or the tensor list is full. A 70-parameter model
// with one 4M-element weight thus gets 64 blocks for that weight and one for each small bias,
// instead of a fixed number per tensor.
//
// Inside a chunk each thread takes 4 consecutive elements at a time: one 4-wide load per array
// when every array's chunk is aligned for it (16 bytes for f32, 8 for 16-bit types), element by
// element otherwise (offset views, odd lengths).
#pragma once
#include <cstdint>
#include <vector>

#include "core/cuda/device_math.cuh"
#include "kernels/cuda/launch.cuh"

namespace hg::kernels::cuda {

// The 16-bit <-> f32 conversions on the device are core's (core/cuda/device_math.cuh).
using cuda_detail::acc_t;
using cuda_detail::from_acc;
using cuda_detail::to_acc;

constexpr int64_t kChunk = 65536;       // elements per block
constexpr int kMaxChunkBlocks = 320;    // blocks per launch (the table's length)
constexpr int kVec = 4;                 // elements per thread per step

// The kernel arguments of one launch: per-tensor metadata and the block -> (tensor, chunk) table.
// NOTE: kernel arguments are limited to 4 KiB on older toolkits; every user static_asserts it.
template <class Meta, int kMaxTensors>
struct ChunkTable {
  Meta tensors[kMaxTensors];
  uint8_t tensor_of_block[kMaxChunkBlocks];
  int32_t chunk_of_block[kMaxChunkBlocks];
};
static_assert(kMaxChunkBlocks * (sizeof(uint8_t) + sizeof(int32_t)) < 2048);

// Calls launch(table, blocks) for consecutive runs of the tensors' chunks; numels[k] is the
// element count of metas[k]. Zero-size tensors get no block.
template <class Meta, int kMaxTensors, class Launch>
void launch_chunked(const std::vector<Meta>& metas, const std::vector<int64_t>& numels, const Launch& launch) {
  static_assert(kMaxTensors <= 255, "tensor_of_block is a byte");
  ChunkTable<Meta, kMaxTensors> table{};
  int slot = 0, blocks = 0;
  for (size_t k = 0; k < metas.size(); ++k) {
    const int64_t chunks = (numels[k] + kChunk - 1) / kChunk;
    if (chunks == 0) continue;
    table.tensors[slot] = metas[k];
    for (int64_t c = 0; c < chunks; ++c) {
      table.tensor_of_block[blocks] = uint8_t(slot);
      table.chunk_of_block[blocks] = int32_t(c);
      ++blocks;
      const bool last_chunk = c + 1 == chunks;
      if (blocks == kMaxChunkBlocks || (last_chunk && slot + 1 == kMaxTensors)) {
        launch(table, blocks);
        blocks = 0;
        if (!last_chunk) table.tensors[0] = metas[k];  // the rest of this tensor opens the next launch
        slot = last_chunk ? -1 : 0;
      }
    }
    ++slot;
  }
  if (blocks > 0) launch(table, blocks);
}

// This block's tensor and the bounds of its chunk within it.
template <class Meta, int kMaxTensors>
struct BlockChunk {
  const Meta& meta;
  int64_t start;  // first element of the chunk
  int64_t n;      // elements in the chunk
};
template <class Meta, int kMaxTensors>
__device__ __forceinline__ BlockChunk<Meta, kMaxTensors> block_chunk(const ChunkTable<Meta, kMaxTensors>& table) {
  const Meta& meta = table.tensors[table.tensor_of_block[blockIdx.x]];
  const int64_t start = int64_t(table.chunk_of_block[blockIdx.x]) * kChunk;
  return {meta, start, min(kChunk, meta.numel - start)};
}

// ---- 4-element loads and stores ----------------------------------------------------------------

template <class T>
struct alignas(kVec * sizeof(T)) Vec {
  T lane[kVec];
};

// Whether p (already offset to the chunk) allows Vec loads; null pointers (absent arrays) do.
template <class T>
__device__ __forceinline__ bool vec_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Vec<T>) == 0;
}

// Elements i .. i+3 of p in the compute type; lanes past n read as 0.
template <class T>
__device__ __forceinline__ void load_vec(const T* p, int64_t i, int64_t n, bool wide, acc_t<T> (&out)[kVec]) {
  if (wide) {
    const Vec<T> v = *reinterpret_cast<const Vec<T>*>(p + i);
    for (int j = 0; j < kVec; ++j) out[j] = to_acc(v.lane[j]);
  } else {
    for (int j = 0; j < kVec; ++j) out[j] = i + j < n ? to_acc(p[i + j]) : acc_t<T>(0);
  }
}

// Stores lanes i .. i+3 (those below n), rounded to T.
template <class T>
__device__ __forceinline__ void store_vec(T* p, int64_t i, int64_t n, bool wide, const acc_t<T> (&in)[kVec]) {
  if (wide) {
    Vec<T> v;
    for (int j = 0; j < kVec; ++j) v.lane[j] = from_acc<T>(in[j]);
    *reinterpret_cast<Vec<T>*>(p + i) = v;
  } else {
    for (int j = 0; j < kVec; ++j)
      if (i + j < n) p[i + j] = from_acc<T>(in[j]);
  }
}

}  // namespace hg::kernels::cuda
