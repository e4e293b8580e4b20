"""Double of sglang/srt/constants.py: the memory types release/resume_memory_occupation take
as tags (all three when a request names none)."""

GPU_MEMORY_TYPE_KV_CACHE = "kv_cache"
GPU_MEMORY_TYPE_WEIGHTS = "weights"
GPU_MEMORY_TYPE_CUDA_GRAPH = "cuda_graph"
GPU_MEMORY_ALL_TYPES = [GPU_MEMORY_TYPE_KV_CACHE, GPU_MEMORY_TYPE_WEIGHTS,
                        GPU_MEMORY_TYPE_CUDA_GRAPH]
