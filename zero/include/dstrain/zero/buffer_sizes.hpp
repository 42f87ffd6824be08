// The sizes of ZeRO's buffers from their options alone: the GradientReducer's buckets and the NVMe
// swappers' buffers. The reducer and the swappers allocate by these, and ds::MemoryPlan predicts by
// them (engine/memory_plan.hpp), so the two never drift.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "dstrain/io/swap_units.hpp"

namespace ds::zero {

// With overlap_comm the first bucket holds at most this many elements (4 MiB of fp32), as DDP's
// first bucket is small: its reduction starts as soon as backward has the last parameters'
// gradients, not a whole bucket later. At 4 x 1 over 1 Gbit/s, where the step is the link's, that
// was 3% more samples/s (25M GPT, 5e6-element buckets: 4.84 against 4.70, medians of 5 alternated
// runs; docs/multi-node.md).
inline constexpr int64_t kFirstOverlappedBucketNumel = int64_t{1} << 20;

// GradientReducer: buckets of consecutive parameters, built from the last one back (backward
// finishes the last parameters first, so the first bucket fills first); a bucket takes parameters
// until it holds bucket_numel elements (the first one, with `overlap`, kFirstOverlappedBucketNumel
// if less), so it may exceed that by one parameter. `numels`: each parameter's elements as the
// reducer packs them (its chunk times the partitions). Returns each bucket's [first, last]
// parameter, the last parameters' bucket first.
struct BucketRange {
  size_t first = 0;
  size_t last = 0;
};
inline std::vector<BucketRange> reduce_buckets(const std::vector<int64_t>& numels, int64_t bucket_numel,
                                               bool overlap) {
  std::vector<BucketRange> buckets;
  for (size_t end = numels.size(); end > 0;) {
    const int64_t limit =
        overlap && buckets.empty() ? std::min(bucket_numel, kFirstOverlappedBucketNumel) : bucket_numel;
    size_t first = end - 1;
    int64_t numel = numels[first];
    while (first > 0 && numel < limit) numel += numels[--first];
    buckets.push_back({first, end - 1});
    end = first;
  }
  return buckets;
}

// GradientReducer's bucket buffers (a bucket packed for a reduce-scatter or a swap file), in
// elements, at the most: each bucket's buffer is taken when its first gradient arrives, while
// `in_flight` buckets before it are still being reduced (GradientReducer's two with overlap_comm,
// none without: each is then waited for at its launch); a completed bucket's buffer is kept until
// backward ends and handed to the first later bucket it fits. `bucket_numels`: each bucket's
// packed elements in launch order, as reduce_buckets gives them.
inline int64_t reduce_buffer_numel(const std::vector<int64_t>& bucket_numels, size_t in_flight) {
  std::vector<int64_t> live, spares;
  int64_t held = 0, most = 0;
  for (int64_t numel : bucket_numels) {
    auto fits = std::find_if(spares.begin(), spares.end(), [&](int64_t spare) { return spare >= numel; });
    if (fits != spares.end()) {
      live.push_back(*fits);
      spares.erase(fits);
    } else {
      live.push_back(numel);
      held += numel;
    }
    most = std::max(most, held);
    while (live.size() > in_flight) {
      spares.push_back(live.front());
      live.erase(live.begin());
    }
  }
  return most;
}

// OptimizerSwapper: sub-groups of sub_group_size elements (0 or more than the shard: one), rounded
// up to the O_DIRECT alignment.
inline int64_t optimizer_sub_group_numel(int64_t shard_numel, int64_t sub_group_size) {
  const int64_t size = sub_group_size <= 0 || sub_group_size > shard_numel ? shard_numel : sub_group_size;
  return io::round_up(std::max<int64_t>(1, size), io::kAlignElements);
}

// Sub-groups in memory at once: the one stepped, plus the next being read (pipeline_read) and the
// previous being written (pipeline_write). Each holds one buffer per swapped file.
inline int optimizer_swap_slots(bool pipeline_read, bool pipeline_write) {
  return 1 + (pipeline_read ? 1 : 0) + (pipeline_write ? 1 : 0);
}

// The gradient file's staging pages: 4 MiB each (a few large O_DIRECT writes per bucket), and
// enough of them that pages keep being filled while earlier ones are written.
inline constexpr int64_t kGradientPageNumel = int64_t{1} << 20;
inline constexpr int kGradientPages = 4;
inline int64_t gradient_page_numel(int64_t shard_numel) {
  return std::min(kGradientPageNumel, io::round_up(shard_numel, io::kAlignElements));
}

// ParamSwapper: the first chunks in shard order stay resident up to max_in_cpu elements, the rest
// go to the file; every buffer holds the largest swapped chunk.
struct ParamSwapSizes {
  int64_t resident_numel = 0;
  int64_t largest_swapped = 0;     // elements of the largest chunk in the file (0: none is)
  size_t largest_swapped_at = 0;   // its index
  int64_t buffer_numel = 0;        // largest_swapped rounded up to the O_DIRECT alignment
};
inline ParamSwapSizes param_swap_sizes(const std::vector<int64_t>& chunk_numels, int64_t max_in_cpu) {
  ParamSwapSizes sizes;
  bool swapping = false;
  for (size_t i = 0; i < chunk_numels.size(); ++i) {
    const int64_t numel = chunk_numels[i];
    if (!swapping && sizes.resident_numel + numel <= max_in_cpu) {
      sizes.resident_numel += numel;
      continue;
    }
    swapping = true;
    if (numel > sizes.largest_swapped) sizes.largest_swapped = numel, sizes.largest_swapped_at = i;
  }
  sizes.buffer_numel = io::round_up(sizes.largest_swapped, io::kAlignElements);
  return sizes;
}

}  // namespace ds::zero
