"""TMA tensor loads (tc::tma_load_Nd, tc::tma_load_im2col_4d) as the emulator runs them.

Each issuing lane's box is gathered from the global tensor at issue (zero outside it), laid
out row-major with the map's swizzle and counted on the mbarrier; the bytes land in shared
memory when the mbarrier phase they were counted in completes (barriers.py). What the GPU
refuses is reported rather than run: a box starting off a 16-byte boundary of its tensor's
rows (an illegal instruction there), a destination that is not 128-byte aligned or leaves its
buffer, and in im2col mode a first filter position outside the map's bounding box or off its
stride.
"""
from __future__ import annotations

import numpy as np

from .checker import Site
from .hopper import shared_address, swizzle, tma_box
from .memory import Pointer


def _lane_values(m, values, lane) -> list:
    return [int(np.broadcast_to(np.asarray(v), (m.T,))[lane]) for v in values]


def _land(m, lane, dst: Pointer, tmap, mbar, data, column: int, mode: int, site: Site):
    """Count one lane's gathered box on mbar, to be written at dst when its phase completes."""
    arr_item = data.dtype.itemsize
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    first = int(shared_address(m, dst, np.array([lane]))[0])
    end = m.mem.offsets[id(dst.buffer)] + \
        int(np.prod([int(s) for s in dst.buffer.shape])) * (dst.buffer.dtype.bits // 8)
    name = dst.buffer.name
    if column * arr_item % 16:
        # The GPU stops such a load with an illegal-instruction error: a box starts on a
        # 16-byte boundary of its tensor's rows.
        m.reports.add("misaligned", f"{name}: the TMA load at {site.where()} starts at column "
                      f"{column} of {tmap.buffer.name}, {column * arr_item} bytes into a row, "
                      "not a multiple of 16", name, (int(lane),), (site,))
    if first % 128:
        m.reports.add("misaligned", f"{name}: the TMA load at {site.where()} writes shared "
                      f"byte {first}, not 128-byte aligned", name, (int(lane),), (site,))
    if first < m.mem.offsets[id(dst.buffer)] or first + raw.size > end:
        m.reports.add("out-of-bounds", f"{name}: the TMA load at {site.where()} writes "
                      f"{raw.size} bytes at shared byte {first}, outside the buffer", name,
                      (int(lane),), (site,))
        return
    m.barriers.tma_write(int(lane), mbar, swizzle(first + np.arange(raw.size), mode), raw, site)


def tma_load(m, rank: int, dst: Pointer, tmap, mbar: Pointer, coords):
    """tc::tma_load_Nd: the box at coords (innermost first) of a tiled map."""
    arr, box, mode = tma_box(m, tmap, rank, "tma_load")
    site = Site("tma load", dst.buffer.name, m.span)
    for lane in m.lanes:
        starts = _lane_values(m, reversed(coords), lane)
        index, valid = [], np.ones(box, bool)
        for d, (s, b) in enumerate(zip(starts, box)):
            i = s + np.arange(b)
            ok = (i >= 0) & (i < arr.shape[d])
            index.append(np.clip(i, 0, max(arr.shape[d] - 1, 0)))
            valid &= ok.reshape([-1 if e == d else 1 for e in range(rank)])
        data = np.where(valid, arr[np.ix_(*index)], np.zeros((), arr.dtype))
        _land(m, lane, dst, tmap, mbar, data, starts[-1], mode, site)


def _positions(size: int, lower: int, upper: int, stride: int) -> np.ndarray:
    """The filter positions of the bounding box along one spatial dimension of `size`."""
    return np.arange(lower, size - 1 + upper + 1, stride)


def tma_load_im2col(m, dst: Pointer, tmap, mbar: Pointer, args):
    """tc::tma_load_im2col_4d(c, w, h, n, off_w, off_h) through an im2col map over an NHWC
    image: pixels x channels, the filter positions walked along W, then H, then N."""
    arr, (pixels, channels), mode = tma_box(m, tmap, 2, "tma_load_im2col", tensor_rank=4)
    lower, upper, stride = tmap.im2col
    N, H, W, C = arr.shape
    hs, ws = _positions(H, lower, upper, stride), _positions(W, lower, upper, stride)
    site = Site("tma im2col load", dst.buffer.name, m.span)
    for lane in m.lanes:
        c, w, h, n, off_w, off_h = _lane_values(m, args, lane)
        if w not in ws or h not in hs:
            m.reports.add("out-of-bounds", f"{dst.buffer.name}: the TMA im2col load at "
                          f"{site.where()} starts at filter position (h {h}, w {w}), not one "
                          f"of the map's bounding box ({lower} .. {upper} past the image, "
                          f"stride {stride})", dst.buffer.name, (int(lane),), (site,))
            continue
        q = (n * len(hs) + int(np.flatnonzero(hs == h)[0])) * len(ws) + \
            int(np.flatnonzero(ws == w)[0]) + np.arange(pixels)
        image = q // (len(hs) * len(ws))
        row = hs[q // len(ws) % len(hs)] + off_h
        col = ws[q % len(ws)] + off_w
        chan = c + np.arange(channels)
        inside = ((image < N) & (row >= 0) & (row < H) & (col >= 0) & (col < W))[:, None] & \
            ((chan >= 0) & (chan < C))[None, :]
        data = arr[np.clip(image, 0, N - 1)[:, None], np.clip(row, 0, H - 1)[:, None],
                   np.clip(col, 0, W - 1)[:, None], np.clip(chan, 0, C - 1)[None, :]]
        data = np.where(inside, data, np.zeros((), arr.dtype))
        _land(m, lane, dst, tmap, mbar, data, c, mode, site)
