"""FlashInfer's `BatchDecodeWithPagedKVCacheWrapper` over ferrinfer's decode op.

`plan` reads the page table's bounds and last-page lengths on the host (FlashInfer's too), cuts
each request's keys into work items (`ferrinfer_launch::decode::plan`: long requests split
across the multiprocessors) and lays the items and their partial states out in the workspace;
`run` then launches `batch_decode_with_paged_kv_cache` and may be called any number of times,
inside a CUDA graph too. With `use_cuda_graph=True` (FlashInfer's CUDA-graph mode) every tensor
`run` reads keeps its address from plan to plan: the page table goes into the buffers given at
construction and the work items into tensors padded to the most items a batch of that size can
have (`ferrinfer_launch::decode::plan_capacity`, idle items past the plan's), so a `run` captured
once replays correctly after any later `plan` of the same batch size. Works with PyTorch tensors
(CUDA or CPU) and NumPy arrays (CPU).
"""

from .ferrinfer import _decode_plan, _decode_plan_capacity, batch_decode_with_paged_kv_cache

_IDLE_ITEM = [-1, 0, 0]

_FLOAT32_BYTES = 4


def _is_torch(x):
    return type(x).__module__.startswith("torch")


def _int32_like(reference, values):
    """`values` as an int32 array of `reference`'s framework and device."""
    if _is_torch(reference):
        import torch

        return torch.tensor(values, dtype=torch.int32, device=reference.device)
    import numpy

    return numpy.asarray(values, dtype=numpy.int32)


def _float32_view(buffer, start, count):
    """`count` float32 values of the byte buffer `buffer` from byte `start`."""
    if _is_torch(buffer):
        import torch

        return buffer[start : start + count * _FLOAT32_BYTES].view(torch.float32)
    import numpy

    return buffer[start : start + count * _FLOAT32_BYTES].view(numpy.float32)


def _copy_into(buffer, values):
    """`values` (a tensor or array) into the first entries of `buffer`, in place."""
    if _is_torch(buffer):
        import torch

        buffer[:len(values)].copy_(values if _is_torch(values) else torch.as_tensor(values))
    else:
        buffer[:len(values)] = values


def _host_ints(x):
    return [int(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]


def _multiprocessors(buffer):
    if _is_torch(buffer) and buffer.is_cuda:
        import torch

        return torch.cuda.get_device_properties(buffer.device).multi_processor_count
    return 1


class BatchDecodeWithPagedKVCacheWrapper:
    """Decode attention over a paged KV cache, FlashInfer's wrapper of the same name:
    `plan(indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size, …)`
    once per batch layout, then `run(q, paged_kv_cache)` for each layer."""

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False,
                 use_tensor_cores=False, paged_kv_indptr_buffer=None, paged_kv_indices_buffer=None,
                 paged_kv_last_page_len_buffer=None, backend="auto", jit_args=None):
        if kv_layout not in ("NHD", "HND"):
            raise ValueError(f"`kv_layout` is {kv_layout!r}; expected \"NHD\" or \"HND\"")
        self._fixed = None
        if use_cuda_graph:
            buffers = dict(paged_kv_indptr_buffer=paged_kv_indptr_buffer,
                           paged_kv_indices_buffer=paged_kv_indices_buffer,
                           paged_kv_last_page_len_buffer=paged_kv_last_page_len_buffer)
            for name, buffer in buffers.items():
                if buffer is None:
                    raise ValueError(f"`{name}` is required with `use_cuda_graph=True`: the captured "
                                     "run reads the page table from it")
            if len(paged_kv_indptr_buffer) != len(paged_kv_last_page_len_buffer) + 1:
                raise ValueError(f"`paged_kv_indptr_buffer` has {len(paged_kv_indptr_buffer)} entries; "
                                 f"expected {len(paged_kv_last_page_len_buffer) + 1} (the batch size + 1)")
            self._fixed = dict(indptr=paged_kv_indptr_buffer, indices=paged_kv_indices_buffer,
                               last=paged_kv_last_page_len_buffer, work=None, work_indptr=None)
        self._workspace = float_workspace_buffer
        self._kv_layout = kv_layout
        self._plan = None

    @property
    def is_cuda_graph_enabled(self):
        return self._fixed is not None

    def reset_workspace_buffer(self, float_workspace_buffer, int_workspace_buffer=None):
        self._workspace = float_workspace_buffer

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
             kv_data_type=None, data_type=None, sm_scale=None, rope_scale=None, rope_theta=None,
             non_blocking=True, block_tables=None, seq_lens=None, fixed_split_size=None,
             disable_split_kv=False):
        bounds, lasts = _host_ints(indptr), _host_ints(last_page_len)
        if len(bounds) != len(lasts) + 1:
            raise ValueError(f"`indptr` has {len(bounds)} bounds; expected {len(lasts) + 1} "
                             "(`last_page_len`'s length + 1)")
        if num_kv_heads < 1 or num_qo_heads % num_kv_heads != 0:
            raise ValueError(f"`num_qo_heads` is {num_qo_heads}; expected a multiple of "
                             f"`num_kv_heads` ({num_kv_heads})")
        lengths = [0 if end <= begin else (end - begin - 1) * page_size + last
                   for begin, end, last in zip(bounds, bounds[1:], lasts)]
        # FlashInfer's `fixed_split_size` counts pages; a value ≤ 0 leaves the split to the planner.
        fixed_keys = fixed_split_size * page_size if fixed_split_size is not None and fixed_split_size > 0 else None
        work, work_bounds = _decode_plan(lengths, num_kv_heads, _multiprocessors(self._workspace),
                                         fixed_keys, bool(disable_split_kv))
        if self._fixed is not None:
            capacity = _decode_plan_capacity(len(lengths), _multiprocessors(self._workspace))
            if len(work) // 3 > capacity:
                raise ValueError(f"`fixed_split_size` {fixed_split_size} cuts this batch into {len(work) // 3} "
                                 f"work items; with `use_cuda_graph=True` they are at most {capacity}: "
                                 "a larger split size, or `disable_split_kv=True`")
            kv_indptr, indices, last_page_len = self._fill_page_table(indptr, indices, last_page_len, len(lasts))
            work = work + _IDLE_ITEM * (capacity - len(work) // 3)
        else:
            kv_indptr = indptr
        items = len(work) // 3
        values, scores = items * num_qo_heads * head_dim, items * num_qo_heads
        needed = (values + scores) * _FLOAT32_BYTES
        available = self._workspace.numel() * self._workspace.element_size() if _is_torch(self._workspace) \
            else self._workspace.nbytes
        if needed > available:
            raise ValueError(f"`float_workspace_buffer` holds {available} bytes; this plan's "
                             f"{items} work items need {needed}")
        partial_v = _float32_view(self._workspace, 0, values).reshape(items, num_qo_heads, head_dim)
        partial_s = _float32_view(self._workspace, values * _FLOAT32_BYTES, scores).reshape(items, num_qo_heads)
        work, work_bounds = self._work_tensors(work, work_bounds)
        self._plan = dict(
            kv_indptr=kv_indptr, kv_indices=indices, kv_last_page_len=last_page_len,
            work=work.reshape(items, 3), work_indptr=work_bounds,
            partial_v=partial_v, partial_s=partial_s,
            scalars=dict(pos_encoding_mode=pos_encoding_mode, window_left=window_left,
                         logits_soft_cap=logits_soft_cap, sm_scale=sm_scale, rope_scale=rope_scale,
                         rope_theta=rope_theta),
        )

    def _fill_page_table(self, indptr, indices, last_page_len, batch):
        """CUDA-graph mode: the plan's page table copied into the fixed buffers (the batch size
        fixed by them); the views `run` passes."""
        fixed = self._fixed
        if batch != len(fixed["last"]):
            raise ValueError(f"the batch size is {batch}; with `use_cuda_graph=True` it is fixed at "
                             f"{len(fixed['last'])} by `paged_kv_last_page_len_buffer`")
        if len(indices) > len(fixed["indices"]):
            raise ValueError(f"`indices` has {len(indices)} pages; `paged_kv_indices_buffer` holds "
                             f"{len(fixed['indices'])}")
        _copy_into(fixed["indptr"], indptr)
        _copy_into(fixed["indices"], indices)
        _copy_into(fixed["last"], last_page_len)
        return fixed["indptr"], fixed["indices"], fixed["last"]

    def _work_tensors(self, work, work_bounds):
        """The plan's items and bounds as int32 tensors on the workspace's device: new ones, or
        in CUDA-graph mode the same ones each plan (its items padded to a fixed count)."""
        if self._fixed is None:
            return _int32_like(self._workspace, work), _int32_like(self._workspace, work_bounds)
        fixed = self._fixed
        if fixed["work"] is None or len(fixed["work"]) != len(work):
            fixed["work"] = _int32_like(self._workspace, work)
            fixed["work_indptr"] = _int32_like(self._workspace, work_bounds)
        else:
            _copy_into(fixed["work"], work)
            _copy_into(fixed["work_indptr"], work_bounds)
        return fixed["work"], fixed["work_indptr"]

    begin_forward = plan

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None,
            lse=None, return_lse=False, enable_pdl=None, window_left=None, sinks=None):
        if self._plan is None:
            raise ValueError("`run` before `plan`: plan the batch first")
        if sinks is not None:
            raise ValueError("`sinks` is not supported yet")
        p = self._plan
        scalars = dict(p["scalars"])
        if window_left is not None:
            scalars["window_left"] = window_left
        result = batch_decode_with_paged_kv_cache(
            q, paged_kv_cache, p["kv_indptr"], p["kv_indices"], p["kv_last_page_len"], p["work"],
            p["work_indptr"], p["partial_v"], p["partial_s"], kv_layout=self._kv_layout,
            q_scale=q_scale, k_scale=k_scale, v_scale=v_scale, return_lse=True, out=out, lse=lse,
            enable_pdl=enable_pdl, **scalars)
        return result if return_lse else result[0]

    forward = run

    def end_forward(self):
        pass
