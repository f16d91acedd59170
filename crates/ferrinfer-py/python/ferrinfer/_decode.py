"""FlashInfer's `BatchDecodeWithPagedKVCacheWrapper` over ferrinfer's decode op.

`plan` reads the page table's bounds and last-page lengths on the host (FlashInfer's too), cuts
each request's keys into work items (`ferrinfer_launch::decode::plan`: long requests split
across the multiprocessors) and lays the items and their partial states out in the workspace;
`run` then launches `batch_decode_with_paged_kv_cache` and may be called any number of times,
inside a CUDA graph too. Works with PyTorch tensors (CUDA or CPU) and NumPy arrays (CPU).
"""

from .ferrinfer import _decode_plan, batch_decode_with_paged_kv_cache

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
        if use_cuda_graph:
            raise ValueError("`use_cuda_graph=True` is not supported yet; plan and run outside a "
                             "graph, or capture `run` of a plan made before the capture")
        self._workspace = float_workspace_buffer
        self._kv_layout = kv_layout
        self._plan = None

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
        if disable_split_kv:
            work = [v for b, n in enumerate(lengths) for v in (b, 0, n)]
            work_bounds = list(range(len(lengths) + 1))
        else:
            work, work_bounds = _decode_plan(lengths, num_kv_heads, _multiprocessors(self._workspace))
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
        self._plan = dict(
            kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last_page_len,
            work=_int32_like(self._workspace, work).reshape(items, 3),
            work_indptr=_int32_like(self._workspace, work_bounds),
            partial_v=partial_v, partial_s=partial_s,
            scalars=dict(pos_encoding_mode=pos_encoding_mode, window_left=window_left,
                         logits_soft_cap=logits_soft_cap, sm_scale=sm_scale, rope_scale=rope_scale,
                         rope_theta=rope_theta),
        )

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
